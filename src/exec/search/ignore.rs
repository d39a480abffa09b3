//! Ignore rules: `.gitignore`-format files and the grep glob filter, turned into verdicts
//! on relative paths. Never reads directories; the walker (`walk.rs`) decides which files
//! apply where.
//!
//! One line of an ignore file, as git and ripgrep read it:
//! - blank lines and lines starting with `#` are skipped; trailing spaces are dropped
//!   unless escaped (`\ `); a leading `\#` or `\!` is a literal `#` or `!`;
//! - `!pattern` re-includes what an earlier line excluded (later lines win);
//! - `pattern/` matches directories only;
//! - a pattern with a `/` at the start or in the middle is anchored to the directory of the
//!   ignore file (`/build`, `doc/*.md`); one without matches a name at any depth (`*.log`);
//! - `dir/**` matches everything inside `dir` but not `dir` itself;
//! - globs follow `globs.rs` (`*`, `?`, `[a-z]`, `**`, `{a,b}`); a line that is not a valid
//!   glob is skipped, as ripgrep does.

use super::globs::{Glob, GlobError};

/// What a set of rules says about one path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// No rule matched.
    None,
    /// The last matching rule excludes the path.
    Ignore,
    /// The last matching rule re-includes the path.
    Whitelist,
}

#[derive(Debug, Clone)]
struct Rule {
    glob: Glob,
    /// Written with a leading `!`.
    negated: bool,
    /// Written with a trailing `/`.
    dir_only: bool,
}

/// The rules of one ignore file, matched against paths relative to its directory.
#[derive(Debug, Clone, Default)]
pub(crate) struct IgnoreRules {
    rules: Vec<Rule>,
}

impl IgnoreRules {
    /// Parses the text of an ignore file, skipping lines that are not valid globs.
    pub(crate) fn parse(text: &str) -> IgnoreRules {
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let rules = text
            .lines()
            .filter_map(|line| parse_line(line).ok().flatten())
            .collect();
        IgnoreRules { rules }
    }

    /// Whether no line produced a rule.
    pub(crate) fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The verdict of the last rule matching `path` (relative, `/`-separated).
    pub(crate) fn verdict(&self, path: &str, is_dir: bool) -> Verdict {
        for rule in self.rules.iter().rev() {
            if (!rule.dir_only || is_dir) && rule.glob.is_match(path) {
                return if rule.negated {
                    Verdict::Whitelist
                } else {
                    Verdict::Ignore
                };
            }
        }
        Verdict::None
    }
}

/// Parses one line; `Ok(None)` for blank lines and comments.
fn parse_line(line: &str) -> Result<Option<Rule>, GlobError> {
    if line.starts_with('#') {
        return Ok(None);
    }
    let mut line = if line.ends_with("\\ ") {
        line
    } else {
        line.trim_end()
    };
    if line.is_empty() {
        return Ok(None);
    }
    let mut negated = false;
    let mut anchored = false;
    if line.starts_with("\\!") || line.starts_with("\\#") {
        line = &line[1..];
    } else {
        if let Some(rest) = line.strip_prefix('!') {
            negated = true;
            line = rest;
        }
        if let Some(rest) = line.strip_prefix('/') {
            anchored = true;
            line = rest;
        }
    }
    let mut dir_only = false;
    if let Some(rest) = line.strip_suffix('/') {
        dir_only = true;
        line = rest.strip_suffix('\\').unwrap_or(rest);
    }
    let mut glob = String::with_capacity(line.len() + 5);
    let matches_anywhere_already = line.starts_with("**/") || line == "**";
    if !(anchored || line.contains('/') || matches_anywhere_already) {
        glob.push_str("**/");
    }
    glob.push_str(line);
    if glob.ends_with("/**") {
        glob.push_str("/*");
    }
    Ok(Some(Rule {
        glob: Glob::new(&glob)?,
        negated,
        dir_only,
    }))
}

/// The grep glob filter, with ripgrep's `--glob` semantics: gitignore syntax with the
/// meaning inverted. `*.rs` searches only matching files (directories are still entered),
/// `!*.rs` skips matching files and directories; the filter wins over ignore files.
#[derive(Debug, Clone)]
pub(crate) struct GlobFilter {
    rule: Option<Rule>,
}

impl GlobFilter {
    /// Parses the filter; an invalid glob is an error (unlike a line of an ignore file).
    pub(crate) fn new(glob: &str) -> Result<GlobFilter, GlobError> {
        Ok(GlobFilter {
            rule: parse_line(glob)?,
        })
    }

    /// The filter's verdict on `path`, relative to the searched directory.
    pub(crate) fn verdict(&self, path: &str, is_dir: bool) -> Verdict {
        let Some(rule) = &self.rule else {
            return Verdict::None;
        };
        let matched = (!rule.dir_only || is_dir) && rule.glob.is_match(path);
        match (matched, rule.negated) {
            (true, false) => Verdict::Whitelist,
            (true, true) => Verdict::Ignore,
            // A file that misses a positive filter is not searched; a directory is entered.
            (false, false) if !is_dir => Verdict::Ignore,
            (false, _) => Verdict::None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict(text: &str, path: &str, is_dir: bool) -> Verdict {
        IgnoreRules::parse(text).verdict(path, is_dir)
    }

    #[test]
    fn a_name_without_slash_matches_at_any_depth() {
        assert_eq!(verdict("*.log", "a.log", false), Verdict::Ignore);
        assert_eq!(verdict("*.log", "x/y/a.log", false), Verdict::Ignore);
        assert_eq!(verdict("target", "crates/x/target", true), Verdict::Ignore);
        assert_eq!(verdict("*.log", "a.txt", false), Verdict::None);
    }

    #[test]
    fn a_leading_or_middle_slash_anchors_the_pattern() {
        assert_eq!(verdict("/build", "build", true), Verdict::Ignore);
        assert_eq!(verdict("/build", "src/build", true), Verdict::None);
        assert_eq!(verdict("doc/*.md", "doc/a.md", false), Verdict::Ignore);
        assert_eq!(verdict("doc/*.md", "x/doc/a.md", false), Verdict::None);
        assert_eq!(verdict("doc/*.md", "doc/x/a.md", false), Verdict::None);
    }

    #[test]
    fn a_trailing_slash_matches_directories_only() {
        assert_eq!(verdict("out/", "out", true), Verdict::Ignore);
        assert_eq!(verdict("out/", "out", false), Verdict::None);
    }

    #[test]
    fn later_lines_win_and_negation_reincludes() {
        let text = "*.log\n!keep.log\n";
        assert_eq!(verdict(text, "a.log", false), Verdict::Ignore);
        assert_eq!(verdict(text, "keep.log", false), Verdict::Whitelist);
        let text = "!keep.log\n*.log\n";
        assert_eq!(verdict(text, "keep.log", false), Verdict::Ignore);
    }

    #[test]
    fn double_star_patterns() {
        assert_eq!(verdict("**/gen", "a/b/gen", true), Verdict::Ignore);
        assert_eq!(verdict("a/**/z", "a/z", false), Verdict::Ignore);
        assert_eq!(verdict("a/**/z", "a/b/c/z", false), Verdict::Ignore);
        assert_eq!(verdict("vendor/**", "vendor", true), Verdict::None);
        assert_eq!(
            verdict("vendor/**", "vendor/x/y.go", false),
            Verdict::Ignore
        );
    }

    #[test]
    fn comments_blanks_escapes_and_trailing_spaces() {
        let text = "# comment\n\n\\#hash\n\\!bang\nspaced   \nkeep\\ \n";
        assert_eq!(verdict(text, "# comment", false), Verdict::None);
        assert_eq!(verdict(text, "#hash", false), Verdict::Ignore);
        assert_eq!(verdict(text, "!bang", false), Verdict::Ignore);
        assert_eq!(verdict(text, "spaced", false), Verdict::Ignore);
        assert_eq!(verdict(text, "keep ", false), Verdict::Ignore);
    }

    #[test]
    fn character_classes_and_crlf_lines() {
        let text = "file[0-9].txt\r\n*.[oa]\r\n";
        assert_eq!(verdict(text, "file3.txt", false), Verdict::Ignore);
        assert_eq!(verdict(text, "lib.a", false), Verdict::Ignore);
        assert_eq!(verdict(text, "lib.so", false), Verdict::None);
    }

    #[test]
    fn an_invalid_line_is_skipped_and_the_rest_apply() {
        let rules = IgnoreRules::parse("[oops\n*.tmp\n");
        assert_eq!(rules.verdict("[oops", false), Verdict::None);
        assert_eq!(rules.verdict("x.tmp", false), Verdict::Ignore);
    }

    #[test]
    fn a_positive_filter_keeps_matching_files_and_enters_directories() {
        let filter = GlobFilter::new("*.rs").unwrap();
        assert_eq!(filter.verdict("src/main.rs", false), Verdict::Whitelist);
        assert_eq!(filter.verdict("src/main.py", false), Verdict::Ignore);
        assert_eq!(filter.verdict("src", true), Verdict::None);
    }

    #[test]
    fn a_negated_filter_skips_matching_files_and_directories() {
        let filter = GlobFilter::new("!tests").unwrap();
        assert_eq!(filter.verdict("tests", true), Verdict::Ignore);
        assert_eq!(filter.verdict("src/a.rs", false), Verdict::None);
    }

    #[test]
    fn a_filter_with_a_slash_is_anchored_to_the_searched_directory() {
        let filter = GlobFilter::new("src/**/*.ts").unwrap();
        assert_eq!(filter.verdict("src/a/b.ts", false), Verdict::Whitelist);
        assert_eq!(filter.verdict("lib/src/b.ts", false), Verdict::Ignore);
    }

    #[test]
    fn an_invalid_filter_is_an_error() {
        assert_eq!(
            GlobFilter::new("*.{rs").unwrap_err(),
            GlobError::UnclosedAlternates
        );
    }
}
