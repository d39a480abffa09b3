//! Glob patterns for paths (gitignore lines, the grep filter, the glob tool): parsing and
//! matching relative `/`-separated paths. Never touches the file system.
//!
//! Syntax (the subset ripgrep's glob engine and git agree on):
//! - `*` any run of characters except `/`; `?` one character except `/`;
//! - `[abc]`, `[a-z]`, `[!a-z]` / `[^a-z]` one character of (not of) a set, never `/`;
//! - `**` as a whole component: `**/x` (any leading directories, or none), `a/**/b` (any
//!   directories in between, or none), `a/**` (everything below `a`); a `**` inside a
//!   component (`a**`) is a plain `*`;
//! - `{a,b,c}` alternatives (not nested);
//! - `\x` the character `x` literally.
//!
//! Matching is case-sensitive and against the whole path.

use std::fmt;

/// Why a glob could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum GlobError {
    UnclosedClass,
    UnclosedAlternates,
    NestedAlternates,
    DanglingEscape,
    TooComplex,
}

impl fmt::Display for GlobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            GlobError::UnclosedClass => "unclosed character class; missing `]`",
            GlobError::UnclosedAlternates => "unclosed alternatives; missing `}`",
            GlobError::NestedAlternates => "nested `{` alternatives are not supported",
            GlobError::DanglingEscape => "a trailing `\\` escapes nothing",
            GlobError::TooComplex => "the pattern is too complex",
        })
    }
}

/// One piece of a parsed glob.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Literal(char),
    /// `*`: any run of non-`/` characters.
    Star,
    /// `?`: one non-`/` character.
    Question,
    /// `[...]`: ranges (inclusive) and whether the set is negated.
    Class {
        negated: bool,
        ranges: Vec<(char, char)>,
    },
    /// `**/` at the start: zero or more leading directories.
    AnyDirsPrefix,
    /// `/**/` in the middle: a `/`, then zero or more directories.
    AnyDirsMiddle,
    /// `/**` at the end: a `/` and then anything.
    AnythingBelow,
    /// `**` alone: any path.
    Anything,
    /// `{a,b}`: one of several token sequences.
    Alternatives(Vec<Vec<Token>>),
}

/// A compiled glob: literal shapes are compared directly, the rest through a regex.
#[derive(Debug, Clone)]
pub(crate) struct Glob {
    matcher: Matcher,
}

#[derive(Debug, Clone)]
enum Matcher {
    /// The whole path equals this.
    Path(String),
    /// `**/name`: the last component equals this.
    FileName(String),
    /// `**/*suffix`: the last component ends with this.
    FileNameSuffix(String),
    Regex(regex::Regex),
}

impl Glob {
    /// Parses a glob matched against whole relative paths.
    pub(crate) fn new(glob: &str) -> Result<Glob, GlobError> {
        let tokens = parse(glob)?;
        Ok(Glob {
            matcher: compile(&tokens)?,
        })
    }

    /// Whether the `/`-separated relative `path` matches.
    pub(crate) fn is_match(&self, path: &str) -> bool {
        match &self.matcher {
            Matcher::Path(literal) => path == literal,
            Matcher::FileName(name) => file_name(path) == name,
            Matcher::FileNameSuffix(suffix) => file_name(path).ends_with(suffix.as_str()),
            Matcher::Regex(regex) => regex.is_match(path),
        }
    }
}

fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

fn parse(glob: &str) -> Result<Vec<Token>, GlobError> {
    let chars: Vec<char> = glob.chars().collect();
    let mut tokens = Vec::new();
    // Inside `{...}`: the finished alternatives and the one being read.
    let mut in_alternatives = false;
    let mut alternatives: Vec<Vec<Token>> = Vec::new();
    let mut current: Vec<Token> = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '{' if in_alternatives => return Err(GlobError::NestedAlternates),
            '{' => {
                in_alternatives = true;
                i += 1;
                continue;
            }
            ',' if in_alternatives => {
                alternatives.push(std::mem::take(&mut current));
                i += 1;
                continue;
            }
            '}' if in_alternatives => {
                alternatives.push(std::mem::take(&mut current));
                tokens.push(Token::Alternatives(std::mem::take(&mut alternatives)));
                in_alternatives = false;
                i += 1;
                continue;
            }
            _ => {}
        }
        let out = if in_alternatives {
            &mut current
        } else {
            &mut tokens
        };
        match c {
            '\\' => {
                let next = *chars.get(i + 1).ok_or(GlobError::DanglingEscape)?;
                out.push(Token::Literal(next));
                i += 2;
            }
            '?' => {
                out.push(Token::Question);
                i += 1;
            }
            '*' if chars.get(i + 1) == Some(&'*') => {
                let starts_component = i == 0 || chars[i - 1] == '/';
                let ends_component = i + 2 == chars.len() || chars[i + 2] == '/';
                // A `/` before the `**` is part of it, unless an earlier `**` took it.
                let slash_before = matches!(out.last(), Some(Token::Literal('/')));
                if !starts_component || !ends_component || in_alternatives {
                    out.push(Token::Star);
                } else if i + 2 == chars.len() {
                    if slash_before {
                        out.pop();
                        out.push(Token::AnythingBelow);
                    } else {
                        out.push(Token::Anything);
                    }
                } else {
                    if slash_before {
                        out.pop();
                        out.push(Token::AnyDirsMiddle);
                    } else {
                        out.push(Token::AnyDirsPrefix);
                    }
                    i += 1; // the `/` after it
                }
                i += 2;
            }
            '*' => {
                out.push(Token::Star);
                i += 1;
            }
            '[' => {
                let (token, next) = parse_class(&chars, i)?;
                out.push(token);
                i = next;
            }
            _ => {
                out.push(Token::Literal(c));
                i += 1;
            }
        }
    }
    if in_alternatives {
        return Err(GlobError::UnclosedAlternates);
    }
    Ok(tokens)
}

/// Parses `[...]` starting at `chars[start] == '['`; returns the token and the index after `]`.
fn parse_class(chars: &[char], start: usize) -> Result<(Token, usize), GlobError> {
    let mut i = start + 1;
    let negated = matches!(chars.get(i), Some('!') | Some('^'));
    if negated {
        i += 1;
    }
    let mut ranges = Vec::new();
    let mut first = true;
    loop {
        let c = *chars.get(i).ok_or(GlobError::UnclosedClass)?;
        if c == ']' && !first {
            return Ok((Token::Class { negated, ranges }, i + 1));
        }
        first = false;
        if chars.get(i + 1) == Some(&'-') && chars.get(i + 2).is_some_and(|&end| end != ']') {
            let end = chars[i + 2];
            if c <= end {
                ranges.push((c, end));
            }
            i += 3;
        } else {
            ranges.push((c, c));
            i += 1;
        }
    }
}

fn compile(tokens: &[Token]) -> Result<Matcher, GlobError> {
    let literal = |tokens: &[Token]| -> Option<String> {
        tokens
            .iter()
            .map(|t| match t {
                Token::Literal(c) => Some(*c),
                _ => None,
            })
            .collect()
    };
    if let Some(path) = literal(tokens) {
        return Ok(Matcher::Path(path));
    }
    if let [Token::AnyDirsPrefix, rest @ ..] = tokens {
        if let Some(name) = literal(rest).filter(|n| !n.contains('/')) {
            return Ok(Matcher::FileName(name));
        }
        if let [Token::Star, rest @ ..] = rest {
            if let Some(suffix) = literal(rest).filter(|s| !s.contains('/')) {
                return Ok(Matcher::FileNameSuffix(suffix));
            }
        }
    }
    let mut pattern = String::from("(?s)^");
    push_regex(tokens, &mut pattern);
    pattern.push('$');
    regex::RegexBuilder::new(&pattern)
        .size_limit(1 << 20)
        .build()
        .map(Matcher::Regex)
        .map_err(|_| GlobError::TooComplex)
}

fn push_regex(tokens: &[Token], out: &mut String) {
    for token in tokens {
        match token {
            Token::Literal(c) => push_escaped(*c, out),
            Token::Star => out.push_str("[^/]*"),
            Token::Question => out.push_str("[^/]"),
            Token::Class { negated, ranges } => {
                if ranges.is_empty() && !negated {
                    // Only reversed ranges (`[z-a]`): a class of nothing never matches.
                    out.push_str("[^\\x{0}-\\x{10FFFF}]");
                    continue;
                }
                out.push_str(if *negated { "[^/" } else { "[" });
                for &(start, end) in ranges {
                    push_class_char(start, out);
                    if start != end {
                        out.push('-');
                        push_class_char(end, out);
                    }
                }
                out.push(']');
                if !negated {
                    // A positive class never matches `/`, like `*` and `?`.
                    out.insert_str(out.len() - 1, "&&[^/]");
                }
            }
            Token::AnyDirsPrefix => out.push_str("(?:.*/)?"),
            Token::AnyDirsMiddle => out.push_str("/(?:.*/)?"),
            Token::AnythingBelow => out.push_str("/.*"),
            Token::Anything => out.push_str(".*"),
            Token::Alternatives(alternatives) => {
                out.push_str("(?:");
                for (index, alternative) in alternatives.iter().enumerate() {
                    if index > 0 {
                        out.push('|');
                    }
                    push_regex(alternative, out);
                }
                out.push(')');
            }
        }
    }
}

fn push_escaped(c: char, out: &mut String) {
    if regex_syntax::is_meta_character(c) {
        out.push('\\');
    }
    out.push(c);
}

fn push_class_char(c: char, out: &mut String) {
    use std::fmt::Write;
    let _ = write!(out, "\\x{{{:x}}}", c as u32);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(glob: &str, path: &str) -> bool {
        Glob::new(glob).unwrap().is_match(path)
    }

    #[test]
    fn star_and_question_never_cross_a_slash() {
        assert!(matches("*.rs", "main.rs"));
        assert!(!matches("*.rs", "src/main.rs"));
        assert!(matches("src/?.rs", "src/a.rs"));
        assert!(!matches("src?a.rs", "src/a.rs"));
        assert!(matches("*", ".hidden"));
    }

    #[test]
    fn double_star_matches_any_number_of_directories() {
        assert!(matches("**/*.rs", "main.rs"));
        assert!(matches("**/*.rs", "a/b/c/main.rs"));
        assert!(matches("src/**/*.rs", "src/main.rs"));
        assert!(matches("src/**/*.rs", "src/a/b/main.rs"));
        assert!(!matches("src/**/*.rs", "lib/main.rs"));
        assert!(matches("src/**", "src/a/b"));
        assert!(!matches("src/**", "src"));
        assert!(matches("**", "a/b/c"));
        assert!(matches("**/target", "a/target"));
        assert!(matches("**/target", "target"));
        assert!(matches("**/**", "a/b"));
        assert!(matches("a/**/**/b", "a/b"));
        assert!(matches("a/**/**/b", "a/x/y/b"));
        assert!(!matches("**/target", "a/target2"));
    }

    #[test]
    fn double_star_inside_a_component_is_a_single_star() {
        assert!(matches("a**b", "axxb"));
        assert!(!matches("a**b", "a/b"));
    }

    #[test]
    fn classes_ranges_and_negation() {
        assert!(matches("file[0-9].txt", "file7.txt"));
        assert!(!matches("file[0-9].txt", "fileA.txt"));
        assert!(matches("file[!0-9].txt", "fileA.txt"));
        assert!(matches("file[^0-9].txt", "fileA.txt"));
        assert!(!matches("a[!x]b", "a/b"));
        assert!(!matches("a[/]b", "a/b"));
        assert!(matches("[]]", "]"));
        assert!(matches("x[a-]", "x-"));
        assert!(!matches("x[z-a]", "xa"));
    }

    #[test]
    fn alternatives_and_escapes() {
        assert!(matches("*.{ts,tsx}", "app.tsx"));
        assert!(matches("*.{ts,tsx}", "app.ts"));
        assert!(!matches("*.{ts,tsx}", "app.js"));
        assert!(matches("{src,lib}/**/*.rs", "lib/x/y.rs"));
        assert!(matches("\\*.rs", "*.rs"));
        assert!(!matches("\\*.rs", "a.rs"));
        assert!(matches("a+b(c).txt", "a+b(c).txt"));
    }

    #[test]
    fn invalid_globs_say_why() {
        assert_eq!(Glob::new("[abc").unwrap_err(), GlobError::UnclosedClass);
        assert_eq!(
            Glob::new("{a,b").unwrap_err(),
            GlobError::UnclosedAlternates
        );
        assert_eq!(
            Glob::new("{a,{b}}").unwrap_err(),
            GlobError::NestedAlternates
        );
        assert_eq!(Glob::new("abc\\").unwrap_err(), GlobError::DanglingEscape);
    }

    #[test]
    fn literal_shapes_take_the_fast_paths() {
        assert!(matches!(
            Glob::new("a/b.rs").unwrap().matcher,
            Matcher::Path(_)
        ));
        assert!(matches!(
            Glob::new("**/node_modules").unwrap().matcher,
            Matcher::FileName(_)
        ));
        assert!(matches!(
            Glob::new("**/*.log").unwrap().matcher,
            Matcher::FileNameSuffix(_)
        ));
        assert!(matches("**/*.log", "a/.log"));
    }
}
