//! The in-process line matcher: compiles a grep pattern the way ripgrep does (a match never
//! spans lines) and finds matching lines in file contents, searching for the pattern's
//! required literal first. Never walks directories.
//!
//! Rules shared with the ripgrep backend:
//! - a pattern that contains a literal line break (`\n`) is invalid; classes and `.` never
//!   match `\n` (`\s`, `[^a]` and `(?s).` lose it), `^`/`$` match at line boundaries;
//! - a line is matched with its `\r` (no CRLF mode), reported without `\r\n`/`\n`;
//! - files are raw bytes (no BOM sniffing or transcoding); a NUL byte in the first 8 KiB
//!   makes a file binary and it is skipped; a NUL byte later ends the search of that file
//!   at the line that contains it.

use std::io::{self, Read};

use memchr::memmem;
use regex::bytes::{Regex, RegexBuilder};
use regex_syntax::hir::{Class, ClassBytes, ClassBytesRange, ClassUnicode, ClassUnicodeRange};
use regex_syntax::hir::{Hir, HirKind, Look, Repetition};

use super::prefilter;

/// A file with a NUL byte this early is binary.
const BINARY_PREFIX: usize = 8 * 1024;
/// Files are read in pieces of about this size (a longer line grows the buffer).
const CHUNK: usize = 1 << 20;
/// The buffer a worker starts with. The first read fills it (or reaches the end of the
/// file), so the binary check always sees the first 8 KiB.
const INITIAL_BUFFER: usize = 64 * 1024;
/// The longest line held in memory: a longer line is searched, and reported, by its first
/// `MAX_LINE` bytes only, and the rest of it is skipped (so a 300 MB one-line file costs
/// this much, not 300 MB). Far beyond what a tool shows of a line.
pub(crate) const MAX_LINE: usize = 8 * CHUNK;
const _: () = assert!(BINARY_PREFIX <= INITIAL_BUFFER && INITIAL_BUFFER <= CHUNK);

/// The lines of one file longer than [`MAX_LINE`]: each was searched in its first
/// `MAX_LINE` bytes only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LongLines {
    /// The first such line's number.
    pub(crate) first: u64,
    /// How many there were.
    pub(crate) count: u64,
}

/// A compiled grep pattern.
#[derive(Debug)]
pub(crate) struct LineMatcher {
    /// Never matches a `\n`.
    regex: Regex,
    prefilter: Option<Prefilter>,
    /// A prefilter hit is a match: no need to run the regex.
    exact: bool,
}

#[derive(Debug)]
enum Prefilter {
    One(Box<memmem::Finder<'static>>),
    Any(Regex),
}

impl Prefilter {
    fn find(&self, haystack: &[u8], from: usize) -> Option<usize> {
        match self {
            Prefilter::One(finder) => finder.find(&haystack[from..]).map(|i| from + i),
            Prefilter::Any(regex) => regex.find_at(haystack, from).map(|m| m.start()),
        }
    }
}

/// The error for an invalid grep pattern (kind `InvalidInput`), the same for both backends.
pub(crate) fn invalid_regex(pattern: &str, why: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("invalid regex `{pattern}`: {why}"),
    )
}

/// The parser every grep pattern goes through: case folding as asked, `^`/`$` at line
/// boundaries, and classes over bytes (files are raw bytes).
pub(super) fn parser(case_insensitive: bool) -> regex_syntax::Parser {
    regex_syntax::ParserBuilder::new()
        .case_insensitive(case_insensitive)
        .multi_line(true)
        .utf8(false)
        .build()
}

impl LineMatcher {
    /// Compiles `pattern`; an invalid pattern is an `InvalidInput` error saying why.
    pub(crate) fn new(pattern: &str, case_insensitive: bool) -> io::Result<LineMatcher> {
        let hir = parser(case_insensitive).parse(pattern).map_err(|error| {
            let (kind, column) = match &error {
                regex_syntax::Error::Parse(e) => (e.kind().to_string(), e.span().start.column),
                regex_syntax::Error::Translate(e) => (e.kind().to_string(), e.span().start.column),
                _ => (error.to_string(), 1),
            };
            invalid_regex(
                pattern,
                &format!(
                    "{kind} (at character {column}); fix the pattern, or escape characters \
                         such as ( [ {{ . * + ? with a backslash to match them literally"
                ),
            )
        })?;
        let hir = without_line_breaks(hir).ok_or_else(|| {
            invalid_regex(
                pattern,
                "a line break (`\\n`) can never match because grep matches one line at a \
                 time; search for a pattern within one line",
            )
        })?;
        let regex = RegexBuilder::new(&hir.to_string())
            .build()
            .map_err(|error| invalid_regex(pattern, &format!("{error}; use a simpler pattern")))?;
        let required = prefilter::required(&hir);
        let exact = required.as_ref().is_some_and(|r| r.exact);
        let prefilter = required.and_then(|required| match required.literals.as_slice() {
            [one] => Some(Prefilter::One(Box::new(
                memmem::Finder::new(one).into_owned(),
            ))),
            many => literal_set_regex(many).map(Prefilter::Any),
        });
        Ok(LineMatcher {
            regex,
            exact: exact && prefilter.is_some(),
            prefilter,
        })
    }

    /// Calls `on_line(start, end)` for every matching line of `text` in order (`end` is the
    /// position of the `\n` or the end of `text`) until it returns `false`. `text` holds
    /// whole lines.
    pub(crate) fn find_lines(&self, text: &[u8], mut on_line: impl FnMut(usize, usize) -> bool) {
        let mut from = 0;
        while from < text.len() {
            let hit = match &self.prefilter {
                Some(prefilter) => prefilter.find(text, from),
                None => self.regex.find_at(text, from).map(|m| m.start()),
            };
            let Some(hit) = hit else { break };
            if hit == text.len() && text.last() == Some(&b'\n') {
                break; // an empty match after the last line break is not a line
            }
            let start = memchr::memrchr(b'\n', &text[from..hit]).map_or(from, |i| from + i + 1);
            let end = memchr::memchr(b'\n', &text[hit..]).map_or(text.len(), |i| hit + i);
            let matched = self.prefilter.is_none() || self.exact || {
                self.regex.is_match(&text[start..end])
            };
            if matched && !on_line(start, end) {
                return;
            }
            from = end + 1;
        }
    }

    /// Searches one file's contents from `reader`, pushing up to `limit` matching lines as
    /// (1-based line number, line without its ending). `buffer` is reused between files.
    /// Returns the lines it could search only in part.
    pub(crate) fn search(
        &self,
        reader: &mut impl Read,
        buffer: &mut Vec<u8>,
        limit: usize,
        out: &mut Vec<(u64, String)>,
    ) -> io::Result<Option<LongLines>> {
        self.search_in_chunks(reader, buffer, limit, out, CHUNK)
    }

    fn search_in_chunks(
        &self,
        reader: &mut impl Read,
        buffer: &mut Vec<u8>,
        limit: usize,
        out: &mut Vec<(u64, String)>,
        chunk: usize,
    ) -> io::Result<Option<LongLines>> {
        let mut long: Option<LongLines> = None;
        if buffer.is_empty() {
            buffer.resize(INITIAL_BUFFER.min(chunk), 0);
        }
        let mut filled = 0;
        let mut first_line = 1u64;
        let mut checked_binary = false;
        while out.len() < limit {
            let eof = fill(reader, buffer, &mut filled)?;
            if !eof && buffer.len() < chunk {
                let grown = (buffer.len() * 2).min(chunk);
                buffer.resize(grown, 0);
                continue;
            }
            let data = &buffer[..filled];
            if !checked_binary {
                checked_binary = true;
                if memchr::memchr(0, &data[..filled.min(BINARY_PREFIX)]).is_some() {
                    return Ok(None);
                }
            }
            let (end, last) = match memchr::memchr(0, data) {
                Some(nul) => (
                    memchr::memrchr(b'\n', &data[..nul]).map_or(0, |i| i + 1),
                    true,
                ),
                None if eof => (filled, true),
                None => match memchr::memrchr(b'\n', data) {
                    Some(i) => (i + 1, false),
                    None if buffer.len() >= MAX_LINE => {
                        // A line longer than the cap: search and report its head only,
                        // and say so (a match past the head is not seen).
                        match &mut long {
                            Some(long) => long.count += 1,
                            None => {
                                long = Some(LongLines {
                                    first: first_line,
                                    count: 1,
                                })
                            }
                        }
                        let mut matched = false;
                        self.find_lines(data, |_, _| {
                            matched = true;
                            false
                        });
                        if matched {
                            let line = String::from_utf8_lossy(data).into_owned();
                            out.push((first_line, line));
                        }
                        filled = 0;
                        if !skip_rest_of_line(reader, buffer, &mut filled)? {
                            break;
                        }
                        first_line += 1;
                        continue;
                    }
                    None => {
                        // One line longer than the buffer: make room for all of it.
                        let grown = (buffer.len() * 2).min(MAX_LINE);
                        buffer.resize(grown, 0);
                        continue;
                    }
                },
            };
            let text = &data[..end];
            let (mut counted_to, mut line_number) = (0, first_line);
            self.find_lines(text, |start, line_end| {
                line_number += count_line_breaks(&text[counted_to..start]);
                counted_to = start;
                let mut line = &text[start..line_end];
                if line.last() == Some(&b'\r') {
                    line = &line[..line.len() - 1];
                }
                out.push((line_number, String::from_utf8_lossy(line).into_owned()));
                out.len() < limit
            });
            if last {
                break;
            }
            first_line = line_number + count_line_breaks(&text[counted_to..]);
            buffer.copy_within(end..filled, 0);
            filled -= end;
        }
        Ok(long)
    }
}

/// Reads and drops bytes up to and including the next `\n`; what follows it is moved to the
/// start of `buffer` (`filled` bytes). Returns `false` when the reader ended first.
fn skip_rest_of_line(
    reader: &mut impl Read,
    buffer: &mut [u8],
    filled: &mut usize,
) -> io::Result<bool> {
    loop {
        let n = match reader.read(buffer) {
            Ok(0) => return Ok(false),
            Ok(n) => n,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
            Err(error) => return Err(error),
        };
        if let Some(i) = memchr::memchr(b'\n', &buffer[..n]) {
            buffer.copy_within(i + 1..n, 0);
            *filled = n - i - 1;
            return Ok(true);
        }
    }
}

/// Reads until `buffer` is full or the reader is exhausted; returns whether it was.
fn fill(reader: &mut impl Read, buffer: &mut [u8], filled: &mut usize) -> io::Result<bool> {
    while *filled < buffer.len() {
        match reader.read(&mut buffer[*filled..]) {
            Ok(0) => return Ok(true),
            Ok(n) => *filled += n,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    Ok(false)
}

fn count_line_breaks(text: &[u8]) -> u64 {
    text.iter().filter(|&&b| b == b'\n').count() as u64
}

/// A regex that finds any of `literals` (compiled by the regex crate to a multi-literal
/// searcher).
fn literal_set_regex(literals: &[Vec<u8>]) -> Option<Regex> {
    use std::fmt::Write;
    let mut pattern = String::from("(?-u)");
    for (index, literal) in literals.iter().enumerate() {
        if index > 0 {
            pattern.push('|');
        }
        for &byte in literal {
            if byte.is_ascii_alphanumeric() {
                pattern.push(byte as char);
            } else {
                let _ = write!(pattern, "\\x{byte:02X}");
            }
        }
    }
    Regex::new(&pattern).ok()
}

/// `hir` with `\n` removed from every class and text anchors turned into line anchors;
/// `None` if a literal contains `\n`.
fn without_line_breaks(hir: Hir) -> Option<Hir> {
    Some(match hir.into_kind() {
        HirKind::Literal(literal) => {
            if literal.0.contains(&b'\n') {
                return None;
            }
            Hir::literal(literal.0)
        }
        HirKind::Class(Class::Unicode(mut class)) => {
            class.difference(&ClassUnicode::new([ClassUnicodeRange::new('\n', '\n')]));
            if class.ranges().is_empty() {
                Hir::fail()
            } else {
                Hir::class(Class::Unicode(class))
            }
        }
        HirKind::Class(Class::Bytes(mut class)) => {
            class.difference(&ClassBytes::new([ClassBytesRange::new(b'\n', b'\n')]));
            if class.ranges().is_empty() {
                Hir::fail()
            } else {
                Hir::class(Class::Bytes(class))
            }
        }
        HirKind::Repetition(Repetition {
            min,
            max,
            greedy,
            sub,
        }) => Hir::repetition(Repetition {
            min,
            max,
            greedy,
            sub: Box::new(without_line_breaks(*sub)?),
        }),
        HirKind::Capture(mut capture) => {
            capture.sub = Box::new(without_line_breaks(*capture.sub)?);
            Hir::capture(capture)
        }
        HirKind::Concat(parts) => Hir::concat(
            parts
                .into_iter()
                .map(without_line_breaks)
                .collect::<Option<_>>()?,
        ),
        HirKind::Alternation(branches) => Hir::alternation(
            branches
                .into_iter()
                .map(without_line_breaks)
                .collect::<Option<_>>()?,
        ),
        HirKind::Empty => Hir::empty(),
        // Each line is searched as its own text, so text anchors are line anchors (as in
        // ripgrep, where `\Afoo` finds `foo` at the start of every line).
        HirKind::Look(Look::Start) => Hir::look(Look::StartLF),
        HirKind::Look(Look::End) => Hir::look(Look::EndLF),
        HirKind::Look(look) => Hir::look(look),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(pattern: &str, case_insensitive: bool, text: &str) -> Vec<(u64, String)> {
        let matcher = LineMatcher::new(pattern, case_insensitive).unwrap();
        let mut out = Vec::new();
        matcher
            .search(&mut text.as_bytes(), &mut Vec::new(), usize::MAX, &mut out)
            .unwrap();
        out
    }

    fn numbers(pattern: &str, text: &str) -> Vec<u64> {
        lines(pattern, false, text)
            .into_iter()
            .map(|(n, _)| n)
            .collect()
    }

    #[test]
    fn reports_line_numbers_and_lines_without_endings() {
        let text = "alpha\nbeta Error\r\ngamma\nErrorless\n";
        assert_eq!(
            lines(r"\w*Error", false, text),
            [(2, "beta Error".to_owned()), (4, "Errorless".to_owned())]
        );
    }

    #[test]
    fn a_match_never_spans_lines() {
        assert_eq!(numbers(r"foo\s+bar", "foo\nbar\nfoo  bar\n"), [3]);
        assert_eq!(numbers(r"foo[^x]bar", "foo\nbar\n"), Vec::<u64>::new());
        assert_eq!(numbers(r"(?s)a.b", "a\nb\naxb\n"), [3]);
    }

    #[test]
    fn a_literal_line_break_is_an_invalid_regex() {
        let error = LineMatcher::new(r"a\nb", false).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
        assert!(
            error
                .to_string()
                .starts_with("invalid regex `a\\nb`: a line break")
        );
    }

    #[test]
    fn an_invalid_regex_says_what_and_where() {
        let error = LineMatcher::new("fn foo(", false).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
        let message = error.to_string();
        assert!(
            message.starts_with("invalid regex `fn foo(`: unclosed group"),
            "{message}"
        );
        assert!(message.contains("escape"), "{message}");
    }

    #[test]
    fn anchors_match_at_line_boundaries_and_crlf_is_not_a_line_ending() {
        assert_eq!(numbers("^b", "a\nb\nab\n"), [2]);
        assert_eq!(numbers("a$", "a\nba\nab\na\r\n"), [1, 2]);
    }

    #[test]
    fn empty_matches_do_not_invent_a_line_after_the_last_break() {
        assert_eq!(numbers("^", "a\n\nb\n"), [1, 2, 3]);
        assert_eq!(numbers("^", "a\nb"), [1, 2]);
        assert_eq!(numbers("^", ""), Vec::<u64>::new());
        assert_eq!(numbers("x*", "\n"), [1]);
    }

    #[test]
    fn case_insensitive_search_finds_every_case() {
        assert_eq!(
            numbers("(?i)error", "ERROR\nerror\nErRoR\nerr\n"),
            [1, 2, 3]
        );
        assert_eq!(lines("error", true, "ERROR\nx\n").len(), 1);
    }

    #[test]
    fn a_binary_file_is_skipped_and_a_late_nul_ends_the_search() {
        assert_eq!(numbers("foo", "foo\n\0foo\n"), Vec::<u64>::new());
        let mut text = "foo\n".repeat(3000); // 12 000 bytes
        text.push_str("x\0y\nfoo\n");
        assert_eq!(numbers("foo", &text).len(), 3000);
    }

    #[test]
    fn the_limit_stops_the_search() {
        let matcher = LineMatcher::new("a", false).unwrap();
        let mut out = Vec::new();
        matcher
            .search(&mut "a\na\na\n".as_bytes(), &mut Vec::new(), 2, &mut out)
            .unwrap();
        assert_eq!(out.len(), 2);
    }

    #[test]
    fn a_line_over_the_cap_is_searched_and_reported_by_its_head_only() {
        let mut text = b"x needle ".to_vec();
        text.resize(MAX_LINE + 1000, b'a');
        text.extend_from_slice(b" late\nsecond needle\nlate\n");
        let search = |pattern: &str| {
            let mut out = Vec::new();
            LineMatcher::new(pattern, false)
                .unwrap()
                .search(&mut text.as_slice(), &mut Vec::new(), 10, &mut out)
                .unwrap();
            out
        };
        let mut out = Vec::new();
        let long = LineMatcher::new("needle", false)
            .unwrap()
            .search(&mut text.as_slice(), &mut Vec::new(), 10, &mut out)
            .unwrap();
        assert_eq!(
            long,
            Some(LongLines { first: 1, count: 1 }),
            "the cut is reported"
        );
        let found = search("needle");
        assert_eq!(found.len(), 2);
        assert_eq!((found[0].0, found[0].1.len()), (1, MAX_LINE));
        assert_eq!(found[1], (2, "second needle".to_string()));
        // Past the head of the long line nothing is seen; later lines are numbered right.
        assert_eq!(search("late"), [(3, "late".to_string())]);
    }

    #[test]
    fn every_chunk_size_gives_the_same_lines() {
        let text = "fn get_mut(&mut self)\nlet x = 1;\n\nfn  other_mut (x)\r\nvery long line \
                    with fn a_mut( inside\nlast fn b_mut(";
        for pattern in [r"fn\s+[a-z_]+_mut\s*\(", "^", "x", r"\w+\b"] {
            let matcher = LineMatcher::new(pattern, false).unwrap();
            let mut expected = Vec::new();
            matcher
                .search(
                    &mut text.as_bytes(),
                    &mut Vec::new(),
                    usize::MAX,
                    &mut expected,
                )
                .unwrap();
            assert!(!expected.is_empty(), "{pattern}");
            for chunk in 1..=text.len() + 1 {
                let mut out = Vec::new();
                matcher
                    .search_in_chunks(
                        &mut text.as_bytes(),
                        &mut Vec::new(),
                        usize::MAX,
                        &mut out,
                        chunk,
                    )
                    .unwrap();
                assert_eq!(out, expected, "pattern {pattern}, chunk {chunk}");
            }
        }
    }

    #[test]
    fn prefiltered_and_plain_searches_agree() {
        let text = "struct ParseError;\nimpl Error for IoError {}\nerror\nNoErrorHere\n";
        let with_literal = LineMatcher::new(r"\w+Error\b", false).unwrap();
        assert!(with_literal.prefilter.is_some());
        let mut found = Vec::new();
        with_literal.find_lines(text.as_bytes(), |s, e| {
            found.push(text[s..e].to_owned());
            true
        });
        let plain = Regex::new(r"\w+Error\b").unwrap();
        let expected: Vec<_> = text
            .lines()
            .filter(|l| plain.is_match(l.as_bytes()))
            .collect();
        assert_eq!(found, expected);
    }
}
