//! Parsing the v4a patch format into operations. Text in, [`Patch`] out; it never reads or
//! writes a file.
//!
//! # The grammar we accept
//!
//! A patch is a sequence of lines. Line endings may be `\n` or `\r\n`; the last line needs
//! no ending.
//!
//! ```text
//! patch      := "*** Begin Patch" operation+ "*** End Patch"
//! operation  := add | delete | update
//! add        := "*** Add File: " PATH   ("+" TEXT)*
//! delete     := "*** Delete File: " PATH
//! update     := "*** Update File: " PATH  ["*** Move to: " PATH]  hunk*
//! hunk       := ("@@" [" " HINT])*  change+  ["*** End of File"]
//! change     := " " TEXT      (a context line, kept as it is)
//!             | "-" TEXT      (a line to remove)
//!             | "+" TEXT      (a line to add)
//! ```
//!
//! Rules in words:
//!
//! * The marker and header lines (`*** …`) may carry whitespace before and after them.
//! * Each `@@` line opens a new hunk; several `@@` lines in a row are nested hints (a class,
//!   then a method inside it) that narrow where the hunk applies. The text after `@@` is a
//!   hint: a line of the file (usually a function signature) that comes before the change.
//!   A bare `@@` has no hint. A unified-diff range (`@@ -12,4 +12,5 @@`) is accepted and
//!   ignored. The first hunk of a file may omit `@@` altogether.
//! * `*** End of File` after a hunk anchors it at the end of the file.
//! * An update must have at least one hunk, unless it only moves the file.
//! * Inside a hunk, an empty (or whitespace-only) line is read as an empty context line,
//!   because models often drop the space in front of blank lines.
//!
//! # Leniency before parsing
//!
//! Whitespace around the whole patch is ignored, and so are a Markdown code fence and a shell
//! heredoc wrapper around it: `apply_patch <<'EOF' … EOF` (any delimiter, quoted or not) and
//! `cat <<'EOF' | apply_patch … EOF`.

use std::sync::OnceLock;

use regex::Regex;

/// A parsed patch: its file operations in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Patch {
    /// The file operations, in the order they appear.
    pub operations: Vec<Operation>,
}

/// One file operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Operation {
    /// Create (or replace) a file with `content`.
    Add {
        /// The file, as written in the patch.
        path: String,
        /// The new content: each `+` line followed by `\n`.
        content: String,
    },
    /// Remove a file.
    Delete {
        /// The file, as written in the patch.
        path: String,
    },
    /// Change a file in place, and maybe move it.
    Update {
        /// The file, as written in the patch.
        path: String,
        /// Where the changed file goes, if it moves.
        move_to: Option<String>,
        /// The changes, in order.
        hunks: Vec<Hunk>,
    },
}

/// One change inside an updated file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hunk {
    /// The `@@` hints, outermost first (empty for a bare `@@` or none).
    pub hints: Vec<String>,
    /// The context, removed and added lines, in order.
    pub lines: Vec<HunkLine>,
    /// `*** End of File` followed the hunk: it applies at the end of the file.
    pub end_of_file: bool,
}

/// A line of a hunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HunkLine {
    /// A line that stays (` ` prefix).
    Context(String),
    /// A line to remove (`-` prefix).
    Remove(String),
    /// A line to add (`+` prefix).
    Add(String),
}

impl Hunk {
    /// The lines the file must contain where the hunk applies (context and removed lines).
    pub fn old_lines(&self) -> Vec<&str> {
        self.lines
            .iter()
            .filter_map(|line| match line {
                HunkLine::Context(text) | HunkLine::Remove(text) => Some(text.as_str()),
                HunkLine::Add(_) => None,
            })
            .collect()
    }

    /// The hints as one text for messages: `@@ a @@ b`, or `@@` when there are none.
    pub fn hint_text(&self) -> String {
        if self.hints.is_empty() {
            "@@".to_string()
        } else {
            self.hints
                .iter()
                .map(|h| format!("@@ {h}"))
                .collect::<Vec<_>>()
                .join(" ")
        }
    }
}

const BEGIN: &str = "*** Begin Patch";
const END: &str = "*** End Patch";
const ADD: &str = "*** Add File:";
const DELETE: &str = "*** Delete File:";
const UPDATE: &str = "*** Update File:";
const MOVE: &str = "*** Move to:";
const END_OF_FILE: &str = "*** End of File";

/// Parses `text` as a v4a patch. An `Err` says what is wrong and on which line.
pub fn parse_patch(text: &str) -> Result<Patch, String> {
    let body = unwrap(text);
    let lines: Vec<&str> = body
        .split('\n')
        .map(|line| line.strip_suffix('\r').unwrap_or(line))
        .collect();
    let first = lines.first().copied().unwrap_or("");
    if first.trim() != BEGIN {
        return Err(format!(
            "the first line of the patch must be `{BEGIN}`, got `{}`",
            shorten(first)
        ));
    }
    let last = lines.len() - 1;
    if last == 0 || lines[last].trim() != END {
        return Err(format!(
            "the last line of the patch must be `{END}`, got `{}`; the patch may be cut \
             short: send the whole patch again",
            shorten(lines[last])
        ));
    }
    let mut parser = Parser {
        lines: &lines[..last],
        next: 1,
    };
    let mut operations = Vec::new();
    while let Some(line) = parser.peek() {
        let trimmed = line.trim();
        if trimmed.is_empty() {
            parser.next += 1;
        } else if let Some(path) = header_path(line, ADD) {
            let number = parser.next + 1;
            parser.next += 1;
            operations.push(parser.add(checked_path(path, number)?)?);
        } else if let Some(path) = header_path(line, DELETE) {
            let number = parser.next + 1;
            parser.next += 1;
            operations.push(parser.delete(checked_path(path, number)?)?);
        } else if let Some(path) = header_path(line, UPDATE) {
            let number = parser.next + 1;
            parser.next += 1;
            operations.push(parser.update(checked_path(path, number)?)?);
        } else if trimmed.starts_with("***") {
            return Err(format!(
                "line {}: unknown header `{}`; a file operation starts with `{ADD} path`, \
                 `{DELETE} path` or `{UPDATE} path`",
                parser.next + 1,
                shorten(trimmed)
            ));
        } else {
            return Err(format!(
                "line {}: expected a file operation (`{ADD}`, `{DELETE}` or `{UPDATE}`), got `{}`",
                parser.next + 1,
                shorten(line)
            ));
        }
    }
    if operations.is_empty() {
        return Err(format!(
            "the patch has no file operations: put at least one `{ADD}`, `{DELETE}` or \
             `{UPDATE}` section between `{BEGIN}` and `{END}`"
        ));
    }
    Ok(Patch { operations })
}

struct Parser<'a, 'b> {
    lines: &'b [&'a str],
    /// Index of the next line to read (0-based; messages show it 1-based).
    next: usize,
}

impl<'a> Parser<'a, '_> {
    fn peek(&self) -> Option<&'a str> {
        self.lines.get(self.next).copied()
    }

    /// The next line, unless it starts another file operation.
    fn peek_in_section(&self) -> Option<&'a str> {
        self.peek().filter(|line| !is_operation_header(line))
    }

    fn add(&mut self, path: String) -> Result<Operation, String> {
        let mut content = String::new();
        let mut blank_lines = 0;
        while let Some(line) = self.peek_in_section() {
            if let Some(text) = line.strip_prefix('+') {
                // Blank lines between `+` lines are empty lines of the file.
                for _ in 0..blank_lines {
                    content.push('\n');
                }
                blank_lines = 0;
                content.push_str(text);
                content.push('\n');
            } else if line.trim().is_empty() {
                blank_lines += 1;
            } else {
                return Err(format!(
                    "line {}: every line of an added file must start with `+`; got `{}` in \
                     `{ADD} {path}`",
                    self.next + 1,
                    shorten(line)
                ));
            }
            self.next += 1;
        }
        Ok(Operation::Add { path, content })
    }

    fn delete(&mut self, path: String) -> Result<Operation, String> {
        while let Some(line) = self.peek_in_section() {
            if !line.trim().is_empty() {
                return Err(format!(
                    "line {}: `{DELETE} {path}` takes no lines after it, got `{}`",
                    self.next + 1,
                    shorten(line)
                ));
            }
            self.next += 1;
        }
        Ok(Operation::Delete { path })
    }

    fn update(&mut self, path: String) -> Result<Operation, String> {
        let mut move_to = None;
        if let Some(target) = self.peek().and_then(|line| header_path(line, MOVE)) {
            move_to = Some(checked_path(target, self.next + 1)?);
            self.next += 1;
        }
        let mut hunks: Vec<Hunk> = Vec::new();
        // Whether the last hunk may still take change lines.
        let mut open = false;
        // Hints read since the last change line: they belong to the next hunk.
        let mut pending_hints: Option<Vec<String>> = None;
        while let Some(line) = self.peek_in_section() {
            let number = self.next + 1;
            self.next += 1;
            let trimmed = line.trim();
            if trimmed.starts_with("@@") {
                let hints = pending_hints.get_or_insert_with(Vec::new);
                if let Some(hint) = hint_of(trimmed) {
                    hints.push(hint);
                }
                open = false;
                continue;
            }
            if trimmed == END_OF_FILE {
                match hunks.last_mut() {
                    Some(hunk) if open => {
                        hunk.end_of_file = true;
                        open = false;
                    }
                    _ => {
                        return Err(format!(
                            "line {number}: `{END_OF_FILE}` must follow the lines of a hunk in \
                             `{UPDATE} {path}`"
                        ));
                    }
                }
                continue;
            }
            let change = if let Some(text) = line.strip_prefix(' ') {
                HunkLine::Context(text.to_string())
            } else if let Some(text) = line.strip_prefix('-') {
                HunkLine::Remove(text.to_string())
            } else if let Some(text) = line.strip_prefix('+') {
                HunkLine::Add(text.to_string())
            } else if trimmed.is_empty() {
                HunkLine::Context(String::new())
            } else {
                return Err(format!(
                    "line {number}: unexpected line `{}` in `{UPDATE} {path}`; inside a hunk \
                     every line starts with ` ` (context), `-` (remove) or `+` (add), and a \
                     new hunk starts with `@@`",
                    shorten(line)
                ));
            };
            if let Some(hints) = pending_hints.take() {
                hunks.push(Hunk {
                    hints,
                    lines: Vec::new(),
                    end_of_file: false,
                });
                open = true;
            } else if !open {
                if hunks.last().is_some_and(|h| h.end_of_file) {
                    return Err(format!(
                        "line {number}: a hunk ended with `{END_OF_FILE}` in `{UPDATE} {path}`; \
                         start another hunk with `@@` before more lines"
                    ));
                }
                hunks.push(Hunk {
                    hints: Vec::new(),
                    lines: Vec::new(),
                    end_of_file: false,
                });
                open = true;
            }
            hunks
                .last_mut()
                .expect("a hunk was opened above")
                .lines
                .push(change);
        }
        if pending_hints.is_some() {
            return Err(format!(
                "`{UPDATE} {path}` ends with an `@@` line that has no changes after it; give \
                 each hunk its context, `-` and `+` lines"
            ));
        }
        if hunks.is_empty() && move_to.is_none() {
            return Err(format!(
                "`{UPDATE} {path}` has no hunks: add an `@@` line followed by context, `-` and \
                 `+` lines"
            ));
        }
        Ok(Operation::Update {
            path,
            move_to,
            hunks,
        })
    }
}

/// The path after `header` on `line` (whitespace around the line and the path ignored).
fn header_path<'a>(line: &'a str, header: &str) -> Option<&'a str> {
    line.trim().strip_prefix(header).map(str::trim)
}

fn is_operation_header(line: &str) -> bool {
    let trimmed = line.trim_start();
    trimmed.starts_with(ADD) || trimmed.starts_with(DELETE) || trimmed.starts_with(UPDATE)
}

fn checked_path(path: &str, line_number: usize) -> Result<String, String> {
    if path.is_empty() {
        return Err(format!(
            "line {line_number}: the header has no path; write the file path after the colon"
        ));
    }
    Ok(path.to_string())
}

/// The hint of an `@@` line: the text after `@@`, without a unified-diff range and without a
/// closing `@@`. `None` for a bare `@@`.
fn hint_of(trimmed: &str) -> Option<String> {
    static RANGE: OnceLock<Regex> = OnceLock::new();
    let range = RANGE.get_or_init(|| {
        Regex::new(r"^-\d+(?:,\d+)?\s+\+\d+(?:,\d+)?\s*@@").expect("the range pattern is valid")
    });
    let mut rest = trimmed.trim_start_matches('@').trim();
    if let Some(found) = range.find(rest) {
        rest = rest[found.end()..].trim();
    } else if let Some(stripped) = rest.strip_suffix("@@") {
        rest = stripped.trim();
    }
    (!rest.is_empty()).then(|| rest.to_string())
}

/// Removes surrounding whitespace, a Markdown code fence and a heredoc wrapper.
fn unwrap(text: &str) -> &str {
    static HEREDOC: OnceLock<Regex> = OnceLock::new();
    let heredoc = HEREDOC.get_or_init(|| {
        Regex::new(
            r#"^(?:(?:cat\s+)?<<-?\s*['"]?(\w+)['"]?\s*\|\s*apply_?patch|apply_?patch\s+<<-?\s*['"]?(\w+)['"]?)\s*$"#,
        )
        .expect("the heredoc pattern is valid")
    });
    let mut text = text.trim();
    if text.starts_with("```") {
        if let (Some(first_end), Some(last_start)) = (text.find('\n'), text.rfind('\n')) {
            if text[last_start..].trim() == "```" && first_end < last_start {
                text = text[first_end + 1..last_start].trim();
            }
        }
    }
    if let (Some(first_end), Some(last_start)) = (text.find('\n'), text.rfind('\n')) {
        if let Some(captures) = heredoc.captures(text[..first_end].trim()) {
            let delimiter = captures
                .get(1)
                .or_else(|| captures.get(2))
                .map_or("", |m| m.as_str());
            if text[last_start..].trim() == delimiter && first_end < last_start {
                text = text[first_end + 1..last_start].trim();
            }
        }
    }
    text
}

/// `line` cut to 80 characters for a message.
fn shorten(line: &str) -> String {
    if line.chars().count() <= 80 {
        line.to_string()
    } else {
        let cut: String = line.chars().take(77).collect();
        format!("{cut}...")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn update(hunks: Vec<Hunk>) -> Patch {
        Patch {
            operations: vec![Operation::Update {
                path: "f.txt".into(),
                move_to: None,
                hunks,
            }],
        }
    }

    fn context(text: &str) -> HunkLine {
        HunkLine::Context(text.into())
    }

    #[test]
    fn parses_every_operation() {
        let patch = parse_patch(
            "*** Begin Patch\n*** Add File: a.txt\n+one\n+\n+two\n*** Delete File: b.txt\n\
             *** Update File: c.txt\n*** Move to: d/c.txt\n@@ fn main() {\n x\n-y\n+z\n\
             *** End of File\n*** End Patch\n",
        )
        .unwrap();
        assert_eq!(
            patch.operations,
            vec![
                Operation::Add {
                    path: "a.txt".into(),
                    content: "one\n\ntwo\n".into()
                },
                Operation::Delete {
                    path: "b.txt".into()
                },
                Operation::Update {
                    path: "c.txt".into(),
                    move_to: Some("d/c.txt".into()),
                    hunks: vec![Hunk {
                        hints: vec!["fn main() {".into()],
                        lines: vec![
                            context("x"),
                            HunkLine::Remove("y".into()),
                            HunkLine::Add("z".into())
                        ],
                        end_of_file: true,
                    }],
                },
            ]
        );
    }

    #[test]
    fn consecutive_hint_lines_nest_and_bare_hints_are_empty() {
        let patch = parse_patch(
            "*** Begin Patch\n*** Update File: f.txt\n@@ class A\n@@   def b():\n-x\n+y\n@@\n-p\n+q\n*** End Patch",
        )
        .unwrap();
        let Operation::Update { hunks, .. } = &patch.operations[0] else {
            panic!("not an update")
        };
        assert_eq!(
            hunks[0].hints,
            vec!["class A".to_string(), "def b():".to_string()]
        );
        assert!(hunks[1].hints.is_empty());
        assert_eq!(hunks.len(), 2);
    }

    #[test]
    fn the_first_hunk_may_omit_its_header() {
        let patch =
            parse_patch("*** Begin Patch\n*** Update File: f.txt\n a\n-b\n+c\n*** End Patch\n")
                .unwrap();
        assert_eq!(
            patch,
            update(vec![Hunk {
                hints: vec![],
                lines: vec![
                    context("a"),
                    HunkLine::Remove("b".into()),
                    HunkLine::Add("c".into())
                ],
                end_of_file: false
            }])
        );
    }

    #[test]
    fn unified_diff_ranges_in_hints_are_ignored() {
        assert_eq!(hint_of("@@ -12,4 +12,5 @@ fn x()"), Some("fn x()".into()));
        assert_eq!(hint_of("@@ -1 +1 @@"), None);
        assert_eq!(hint_of("@@ class A @@"), Some("class A".into()));
        assert_eq!(hint_of("@@"), None);
    }

    #[test]
    fn blank_lines_in_a_hunk_are_empty_context_lines() {
        let patch =
            parse_patch("*** Begin Patch\n*** Update File: f.txt\n@@\n a\n\n-b\n*** End Patch")
                .unwrap();
        let Operation::Update { hunks, .. } = &patch.operations[0] else {
            panic!("not an update")
        };
        assert_eq!(
            hunks[0].lines,
            vec![context("a"), context(""), HunkLine::Remove("b".into())]
        );
    }

    #[test]
    fn crlf_patches_and_padded_markers_are_accepted() {
        let patch = parse_patch(
            " *** Begin Patch \r\n  *** Update File: f.txt\r\n@@\r\n-a\r\n+b\r\n *** End Patch ",
        )
        .unwrap();
        assert_eq!(
            patch,
            update(vec![Hunk {
                hints: vec![],
                lines: vec![HunkLine::Remove("a".into()), HunkLine::Add("b".into())],
                end_of_file: false
            }])
        );
    }

    #[test]
    fn heredoc_and_fence_wrappers_are_removed() {
        let inner = "*** Begin Patch\n*** Delete File: x\n*** End Patch";
        for wrapped in [
            format!("apply_patch <<'EOF'\n{inner}\nEOF\n"),
            format!("apply_patch <<\"PATCH\"\n{inner}\nPATCH"),
            format!("cat <<EOF | apply_patch\n{inner}\nEOF"),
            format!("```\n{inner}\n```"),
            format!("```diff\napply_patch <<'EOF'\n{inner}\nEOF\n```\n"),
        ] {
            assert_eq!(unwrap(&wrapped), inner, "{wrapped}");
        }
    }

    #[test]
    fn errors_name_the_problem_and_the_line() {
        let cases = [
            ("*** Begin Patch\n*** End Patch", "no file operations"),
            (
                "*** Update File: a\n*** End Patch",
                "first line of the patch must be `*** Begin Patch`",
            ),
            (
                "*** Begin Patch\n*** Delete File: a\n",
                "last line of the patch must be `*** End Patch`",
            ),
            (
                "*** Begin Patch\n*** Frobnicate File: foo\n*** End Patch",
                "line 2: unknown header `*** Frobnicate File: foo`",
            ),
            (
                "*** Begin Patch\n*** Update File: foo.txt\n*** End Patch",
                "`*** Update File: foo.txt` has no hunks",
            ),
            (
                "*** Begin Patch\n*** Update File: f\n@@\n-a\n?b\n*** End Patch",
                "line 5: unexpected line `?b`",
            ),
            (
                "*** Begin Patch\n*** Add File: f\nno plus\n*** End Patch",
                "line 3: every line of an added file must start with `+`",
            ),
            (
                "*** Begin Patch\n*** Delete File: f\n-x\n*** End Patch",
                "takes no lines after it",
            ),
            (
                "*** Begin Patch\n*** Add File: \n+x\n*** End Patch",
                "line 2: the header has no path",
            ),
            (
                "*** Begin Patch\n*** Update File: f\n@@ x\n*** End Patch",
                "ends with an `@@` line that has no changes",
            ),
            (
                "*** Begin Patch\n*** Update File: f\n*** End of File\n*** End Patch",
                "must follow the lines of a hunk",
            ),
            (
                "*** Begin Patch\nhello\n*** End Patch",
                "line 2: expected a file operation",
            ),
        ];
        for (patch, expected) in cases {
            let error = parse_patch(patch).unwrap_err();
            assert!(error.contains(expected), "{patch:?}: {error}");
        }
    }

    #[test]
    fn a_move_without_hunks_is_a_rename() {
        let patch =
            parse_patch("*** Begin Patch\n*** Update File: a\n*** Move to: b\n*** End Patch")
                .unwrap();
        assert_eq!(
            patch.operations,
            vec![Operation::Update {
                path: "a".into(),
                move_to: Some("b".into()),
                hunks: vec![]
            }]
        );
    }
}
