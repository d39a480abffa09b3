//! Text helpers shared by the editing tools: files as lines with their own line endings,
//! the fuzz levels of line comparison, and finding the region closest to some wanted lines.
//! Pure functions over strings; nothing here touches a file.

use std::fmt::Write as _;

/// A UTF-8 byte order mark.
pub(crate) const BOM: &str = "\u{feff}";

/// One line of a file: its text and the line ending that followed it (`"\r\n"`, `"\n"`, or
/// `""` for a last line without one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Line<'a> {
    pub text: &'a str,
    pub ending: &'a str,
}

/// A text file split into lines, each keeping its own ending, so that lines nobody touches
/// are written back byte for byte.
#[derive(Debug, Clone)]
pub(crate) struct TextFile<'a> {
    /// The file started with a UTF-8 BOM (not part of the first line's text).
    pub bom: bool,
    pub lines: Vec<Line<'a>>,
}

impl<'a> TextFile<'a> {
    /// Splits `content` into lines. A trailing line ending does not start an empty line.
    pub fn parse(content: &'a str) -> TextFile<'a> {
        let (bom, body) = match content.strip_prefix(BOM) {
            Some(rest) => (true, rest),
            None => (false, content),
        };
        let mut lines = Vec::new();
        let mut rest = body;
        while !rest.is_empty() {
            match crate::bytes::find(b'\n', rest.as_bytes()) {
                Some(i) => {
                    let (text, ending) = if i > 0 && rest.as_bytes()[i - 1] == b'\r' {
                        (&rest[..i - 1], &rest[i - 1..=i])
                    } else {
                        (&rest[..i], &rest[i..=i])
                    };
                    lines.push(Line { text, ending });
                    rest = &rest[i + 1..];
                }
                None => {
                    lines.push(Line {
                        text: rest,
                        ending: "",
                    });
                    rest = "";
                }
            }
        }
        TextFile { bom, lines }
    }

    /// The ending most lines use: `"\r\n"` when CRLF endings outnumber LF ones, else `"\n"`.
    pub fn dominant_ending(&self) -> &'static str {
        let crlf = self.lines.iter().filter(|l| l.ending == "\r\n").count();
        let lf = self.lines.iter().filter(|l| l.ending == "\n").count();
        if crlf > lf { "\r\n" } else { "\n" }
    }

    /// The line texts.
    pub fn texts(&self) -> Vec<&'a str> {
        self.lines.iter().map(|l| l.text).collect()
    }
}

/// Joins lines back into file content, with the BOM if `bom`. A line without an ending that
/// is not last gets `ending` so that lines never merge.
pub(crate) fn join_lines(bom: bool, lines: &[Line<'_>], ending: &str) -> String {
    let size: usize = lines.iter().map(|l| l.text.len() + 2).sum();
    let mut out = String::with_capacity(size + 3);
    if bom {
        out.push_str(BOM);
    }
    let last = lines.len().saturating_sub(1);
    for (i, line) in lines.iter().enumerate() {
        out.push_str(line.text);
        if line.ending.is_empty() && i != last {
            out.push_str(ending);
        } else {
            out.push_str(line.ending);
        }
    }
    out
}

/// How loosely two lines were compared, from strictest to loosest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Fuzz {
    /// Byte-identical.
    Exact,
    /// Equal after removing trailing whitespace.
    TrailingWhitespace,
    /// Equal after removing leading and trailing whitespace.
    Whitespace,
    /// Equal after removing surrounding whitespace and mapping typographic quotes, dashes
    /// and spaces to their ASCII forms.
    Punctuation,
}

impl Fuzz {
    /// Every level, strictest first.
    pub const ALL: [Fuzz; 4] = [
        Fuzz::Exact,
        Fuzz::TrailingWhitespace,
        Fuzz::Whitespace,
        Fuzz::Punctuation,
    ];

    /// How the match was made, for a success message; `None` for an exact match.
    pub fn describe(self) -> Option<&'static str> {
        match self {
            Fuzz::Exact => None,
            Fuzz::TrailingWhitespace => Some("ignoring trailing whitespace"),
            Fuzz::Whitespace => Some("ignoring leading and trailing whitespace (indentation)"),
            Fuzz::Punctuation => Some(
                "ignoring surrounding whitespace and treating typographic quotes, dashes and \
                 spaces as their ASCII forms",
            ),
        }
    }

    /// Whether `a` and `b` are equal at this level.
    pub fn lines_equal(self, a: &str, b: &str) -> bool {
        match self {
            Fuzz::Exact => a == b,
            Fuzz::TrailingWhitespace => a.trim_end() == b.trim_end(),
            Fuzz::Whitespace => a.trim() == b.trim(),
            Fuzz::Punctuation => a
                .trim()
                .chars()
                .map(ascii_punctuation)
                .eq(b.trim().chars().map(ascii_punctuation)),
        }
    }
}

/// Maps typographic punctuation and unusual spaces to ASCII (one char to one char).
pub(crate) fn ascii_punctuation(c: char) -> char {
    match c {
        '\u{2018}' | '\u{2019}' | '\u{201A}' | '\u{201B}' | '\u{2032}' | '\u{FF07}' => '\'',
        '\u{201C}' | '\u{201D}' | '\u{201E}' | '\u{201F}' | '\u{2033}' | '\u{00AB}'
        | '\u{00BB}' | '\u{FF02}' => '"',
        '\u{2010}' | '\u{2011}' | '\u{2012}' | '\u{2013}' | '\u{2014}' | '\u{2015}'
        | '\u{2212}' | '\u{FE63}' | '\u{FF0D}' => '-',
        '\u{00A0}' | '\u{2000}'..='\u{200A}' | '\u{202F}' | '\u{205F}' | '\u{3000}' => ' ',
        other => other,
    }
}

/// Finds `wanted` as consecutive lines of `lines`, starting at or after `from`, at exactly
/// the fuzz level `fuzz`. Returns the index of the first line.
pub(crate) fn find_lines(
    lines: &[&str],
    wanted: &[&str],
    from: usize,
    fuzz: Fuzz,
) -> Option<usize> {
    if wanted.is_empty() {
        return Some(from.min(lines.len()));
    }
    if wanted.len() > lines.len() {
        return None;
    }
    (from..=lines.len() - wanted.len()).find(|&start| {
        wanted
            .iter()
            .zip(&lines[start..])
            .all(|(w, l)| fuzz.lines_equal(l, w))
    })
}

/// Every start index where `wanted` matches at level `fuzz`, without overlaps.
pub(crate) fn find_all_lines(lines: &[&str], wanted: &[&str], fuzz: Fuzz) -> Vec<usize> {
    let mut starts = Vec::new();
    let mut from = 0;
    while let Some(start) = find_lines(lines, wanted, from, fuzz) {
        starts.push(start);
        from = start + wanted.len().max(1);
        if from > lines.len() {
            break;
        }
    }
    starts
}

/// The window of `lines` (as long as `wanted`) most similar to `wanted`, line by line.
/// Returns its first index and its similarity in `0.0..=1.0`, or `None` when nothing is
/// similar at all.
pub(crate) fn closest_region(lines: &[&str], wanted: &[&str]) -> Option<(usize, f64)> {
    if wanted.is_empty() || lines.is_empty() {
        return None;
    }
    let window = wanted.len().min(lines.len());
    let mut best: Option<(usize, f64)> = None;
    for start in 0..=lines.len() - window {
        let score: f64 = wanted
            .iter()
            .zip(&lines[start..start + window])
            .map(|(w, l)| line_similarity(w, l))
            .sum::<f64>()
            / wanted.len() as f64;
        if score > best.map_or(0.0, |(_, s)| s) {
            best = Some((start, score));
        }
    }
    best.filter(|(_, score)| *score >= 0.3)
}

/// A cheap similarity of two lines in `0.0..=1.0`: 1 when equal ignoring surrounding
/// whitespace, else the share of bytes in their common prefix and suffix (bytes, not chars:
/// this only ranks regions, and it keeps a search over a large file fast).
fn line_similarity(a: &str, b: &str) -> f64 {
    let (a, b) = (a.trim().as_bytes(), b.trim().as_bytes());
    if a == b {
        return 1.0;
    }
    let longest = a.len().max(b.len());
    let prefix = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let suffix = a
        .iter()
        .rev()
        .zip(b.iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    ((prefix + suffix).min(longest) as f64 / longest as f64) * 0.9
}

/// How `found` (the file's lines) is indented differently from `wanted` (the model's lines)
/// when the difference is consistent: `Some((model_prefix, file_prefix))` such that every
/// non-blank wanted line is `model_prefix + rest` and its file line is `file_prefix + rest'`
/// with the same remaining indentation. `None` when they are indented alike or inconsistently.
pub(crate) fn indentation_change<'w, 'f>(
    wanted: &[&'w str],
    found: &[&'f str],
) -> Option<(&'w str, &'f str)> {
    let indentation = |line: &str| line.len() - line.trim_start().len();
    let mut pairs = wanted
        .iter()
        .zip(found)
        .filter(|(w, f)| !w.trim().is_empty() && !f.trim().is_empty());
    let (w, f) = pairs.next()?;
    let (model, file) = (&w[..indentation(w)], &f[..indentation(f)]);
    if model == file {
        return None;
    }
    let consistent = pairs.all(
        |(w, f)| match (w.strip_prefix(model), f.strip_prefix(file)) {
            (Some(w_rest), Some(f_rest)) => {
                w_rest[..indentation(w_rest)] == f_rest[..indentation(f_rest)]
            }
            _ => false,
        },
    );
    consistent.then_some((model, file))
}

/// `text` with `model_prefix` swapped for `file_prefix` at the start of each non-blank line
/// that has it.
pub(crate) fn reindent_line<'a>(
    line: &'a str,
    change: Option<(&str, &str)>,
) -> std::borrow::Cow<'a, str> {
    match change {
        Some((model, file)) if !line.trim().is_empty() => match line.strip_prefix(model) {
            Some(rest) => std::borrow::Cow::Owned(format!("{file}{rest}")),
            None => std::borrow::Cow::Borrowed(line),
        },
        _ => std::borrow::Cow::Borrowed(line),
    }
}

/// `line 4` or `lines 4-9` for 1-based `first..=last`.
pub(crate) fn line_range(first: usize, last: usize) -> String {
    if first >= last {
        format!("line {first}")
    } else {
        format!("lines {first}-{last}")
    }
}

/// Lines as `NNNNNN | text` (1-based numbers right-aligned to six columns), the format of
/// `read_file`.
pub(crate) fn numbered<'a>(
    first_number: usize,
    lines: impl IntoIterator<Item = &'a str>,
) -> String {
    let mut out = String::new();
    for (i, line) in lines.into_iter().enumerate() {
        let _ = writeln!(out, "{:>6} | {}", first_number + i, line);
    }
    out
}

/// Similarity of two names for "did you mean" suggestions: equal ignoring case, or one
/// edit apart per three characters.
pub(crate) fn names_are_close(a: &str, b: &str) -> bool {
    if a.eq_ignore_ascii_case(b) {
        return true;
    }
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let allowed = (a.len().max(b.len()) / 3).max(1);
    if a.len().abs_diff(b.len()) > allowed {
        return false;
    }
    edit_distance(&a, &b) <= allowed
}

fn edit_distance(a: &[char], b: &[char]) -> usize {
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    let mut current = vec![0; b.len() + 1];
    for (i, ca) in a.iter().enumerate() {
        current[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(ca != cb);
            current[j + 1] = substitution.min(previous[j + 1] + 1).min(current[j] + 1);
        }
        std::mem::swap(&mut previous, &mut current);
    }
    previous[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_keeps_each_line_ending_and_join_restores_the_bytes() {
        for content in [
            "",
            "a",
            "a\n",
            "a\r\nb\nc",
            "\u{feff}x\r\ny\r\n",
            "\n\n",
            "\r\n",
            "lone\rcr\n",
        ] {
            let file = TextFile::parse(content);
            assert_eq!(
                join_lines(file.bom, &file.lines, "\n"),
                content,
                "{content:?}"
            );
        }
        let file = TextFile::parse("a\r\nb\nc");
        assert_eq!(
            file.lines,
            vec![
                Line {
                    text: "a",
                    ending: "\r\n"
                },
                Line {
                    text: "b",
                    ending: "\n"
                },
                Line {
                    text: "c",
                    ending: ""
                },
            ]
        );
    }

    #[test]
    fn dominant_ending_follows_the_majority() {
        assert_eq!(TextFile::parse("a\r\nb\r\nc\n").dominant_ending(), "\r\n");
        assert_eq!(TextFile::parse("a\nb\r\n").dominant_ending(), "\n");
        assert_eq!(TextFile::parse("").dominant_ending(), "\n");
    }

    #[test]
    fn fuzz_levels_loosen_in_order() {
        assert!(Fuzz::Exact.lines_equal("a b", "a b"));
        assert!(!Fuzz::Exact.lines_equal("a b ", "a b"));
        assert!(Fuzz::TrailingWhitespace.lines_equal("a b \t", "a b"));
        assert!(!Fuzz::TrailingWhitespace.lines_equal("  a b", "a b"));
        assert!(Fuzz::Whitespace.lines_equal("  a b ", "\ta b"));
        assert!(!Fuzz::Whitespace.lines_equal("“a” – b", "\"a\" - b"));
        assert!(Fuzz::Punctuation.lines_equal(" “a”\u{a0}– ‘b’", "\"a\" - 'b'"));
    }

    #[test]
    fn find_lines_searches_forward_from_a_start() {
        let lines = ["a", "b", "a", "b"];
        assert_eq!(find_lines(&lines, &["a", "b"], 0, Fuzz::Exact), Some(0));
        assert_eq!(find_lines(&lines, &["a", "b"], 1, Fuzz::Exact), Some(2));
        assert_eq!(find_lines(&lines, &["a", "b"], 3, Fuzz::Exact), None);
        assert_eq!(find_all_lines(&lines, &["a", "b"], Fuzz::Exact), vec![0, 2]);
        assert_eq!(
            find_all_lines(&["x", "x", "x"], &["x", "x"], Fuzz::Exact),
            vec![0]
        );
    }

    #[test]
    fn closest_region_prefers_the_most_similar_window() {
        let lines = [
            "fn a() {",
            "    one();",
            "}",
            "fn b() {",
            "    two(1);",
            "}",
        ];
        let (start, score) = closest_region(&lines, &["fn b() {", "    two(2);"]).unwrap();
        assert_eq!(start, 3);
        assert!(score > 0.5 && score < 1.0, "{score}");
        assert_eq!(closest_region(&lines, &["zzzzzz", "qqqqq"]), None);
    }

    #[test]
    fn indentation_changes_only_when_consistent() {
        assert_eq!(
            indentation_change(&["if x:", "    y()"], &["    if x:", "        y()"]),
            Some(("", "    "))
        );
        assert_eq!(
            indentation_change(&["def b():", "    r"], &["  def b():", "    r"]),
            None
        );
        assert_eq!(indentation_change(&["  a"], &["  a"]), None);
        assert_eq!(reindent_line("    z()", Some(("", "  "))), "      z()");
        assert_eq!(reindent_line("", Some(("", "  "))), "");
    }

    #[test]
    fn numbered_lines_are_right_aligned() {
        assert_eq!(numbered(9, ["a", "b"]), "     9 | a\n    10 | b\n");
    }

    #[test]
    fn close_names_allow_small_typos() {
        assert!(names_are_close("main.rs", "mian.rs"));
        assert!(names_are_close("README.md", "readme.md"));
        assert!(!names_are_close("lib.rs", "cargo.toml"));
    }
}
