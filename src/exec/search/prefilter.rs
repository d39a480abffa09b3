//! Required literals of a regex: a set of strings at least one of which every match must
//! contain (`Error` for `\w+Error\b`, `_mut` for `fn\s+[a-z_]+_mut\s*\(`). Pure analysis of
//! the regex-syntax HIR; never touches file contents.
//!
//! Each HIR node is summarised as either the finite set of strings it matches exactly
//! (`foo`, `colou?r`, `(?i)ab` = `{ab, aB, Ab, AB}`), a set one of which every match
//! contains, or nothing known. A concatenation multiplies adjacent exact sets while they
//! stay small and keeps the best required set seen; an alternation unions its branches.

use regex_syntax::hir::{Class, Hir, HirKind};

/// Largest exact set kept; beyond it a concatenation starts a new run.
const MAX_SET: usize = 64;
/// Largest class expanded into single characters (`[Ee]`, `(?i)k` = `[Kk\u{212A}]`).
const MAX_CLASS: usize = 4;

/// What one HIR node guarantees about its matches.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Summary {
    /// The node matches exactly one of these strings.
    Exact(Vec<Vec<u8>>),
    /// Every match contains one of these strings.
    Contains(Vec<Vec<u8>>),
    /// Nothing useful.
    Unknown,
}

/// The required literals chosen for a regex.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Required {
    /// Every match contains at least one of these (none is empty).
    pub(crate) literals: Vec<Vec<u8>>,
    /// A hit of a literal is itself a match: the regex is exactly this set of strings.
    pub(crate) exact: bool,
}

/// The best required-literal set of `hir`, if one is worth searching for first.
pub(crate) fn required(hir: &Hir) -> Option<Required> {
    let (literals, exact) = match summarize(hir) {
        Summary::Exact(set) => (set, hir.properties().look_set().is_empty()),
        Summary::Contains(set) => (set, false),
        Summary::Unknown => return None,
    };
    // A one-byte literal hits too often to beat running the regex over the whole text.
    (min_len(&literals) >= 2).then_some(Required { literals, exact })
}

fn min_len(set: &[Vec<u8>]) -> usize {
    set.iter().map(Vec::len).min().unwrap_or(0)
}

fn summarize(hir: &Hir) -> Summary {
    match hir.kind() {
        HirKind::Empty | HirKind::Look(_) => Summary::Exact(vec![Vec::new()]),
        HirKind::Literal(literal) => Summary::Exact(vec![literal.0.to_vec()]),
        HirKind::Class(class) => class_strings(class).map_or(Summary::Unknown, Summary::Exact),
        HirKind::Capture(capture) => summarize(&capture.sub),
        HirKind::Repetition(repetition) => {
            let sub = summarize(&repetition.sub);
            match (repetition.min, repetition.max, sub) {
                (1, Some(1), sub) => sub,
                (0, Some(1), Summary::Exact(mut set)) => {
                    set.push(Vec::new());
                    dedup(&mut set);
                    Summary::Exact(set)
                }
                (0, _, _) => Summary::Unknown,
                (n, Some(m), Summary::Exact(set)) if n == m && n <= 8 => {
                    let mut repeated = vec![Vec::new()];
                    for _ in 0..n {
                        if repeated.len() * set.len() > MAX_SET {
                            return usable(set);
                        }
                        repeated = product(&repeated, &set);
                    }
                    Summary::Exact(repeated)
                }
                (_, _, Summary::Exact(set) | Summary::Contains(set)) => usable(set),
                (_, _, Summary::Unknown) => Summary::Unknown,
            }
        }
        HirKind::Alternation(branches) => {
            let mut all_exact = true;
            let mut union = Vec::new();
            for branch in branches {
                match summarize(branch) {
                    Summary::Exact(set) => union.extend(set),
                    Summary::Contains(set) => {
                        all_exact = false;
                        union.extend(set);
                    }
                    Summary::Unknown => return Summary::Unknown,
                }
            }
            dedup(&mut union);
            if union.len() > MAX_SET {
                Summary::Unknown
            } else if all_exact {
                Summary::Exact(union)
            } else {
                usable(union)
            }
        }
        HirKind::Concat(parts) => summarize_concat(parts),
    }
}

/// A required set, unless it contains the empty string (which every text contains).
fn usable(set: Vec<Vec<u8>>) -> Summary {
    if set.is_empty() || set.iter().any(Vec::is_empty) {
        Summary::Unknown
    } else {
        Summary::Contains(set)
    }
}

fn summarize_concat(parts: &[Hir]) -> Summary {
    let mut best: Option<Vec<Vec<u8>>> = None;
    let mut run: Vec<Vec<u8>> = vec![Vec::new()];
    let mut all_exact = true;
    for part in parts {
        match summarize(part) {
            Summary::Exact(set) => {
                if run.len() * set.len() <= MAX_SET {
                    run = product(&run, &set);
                } else {
                    all_exact = false;
                    keep(std::mem::replace(&mut run, set), &mut best);
                }
            }
            Summary::Contains(set) => {
                all_exact = false;
                keep(std::mem::replace(&mut run, vec![Vec::new()]), &mut best);
                keep(set, &mut best);
            }
            Summary::Unknown => {
                all_exact = false;
                keep(std::mem::replace(&mut run, vec![Vec::new()]), &mut best);
            }
        }
    }
    if all_exact {
        dedup(&mut run);
        return Summary::Exact(run);
    }
    keep(run, &mut best);
    best.map_or(Summary::Unknown, Summary::Contains)
}

/// Keeps `candidate` as the best required set if it is usable and better.
fn keep(candidate: Vec<Vec<u8>>, best: &mut Option<Vec<Vec<u8>>>) {
    if let Summary::Contains(candidate) = usable(candidate) {
        if best.as_ref().is_none_or(|b| better(&candidate, b)) {
            *best = Some(candidate);
        }
    }
}

/// Whether `a` is a better set to search for than `b`: longer shortest literal, then fewer
/// alternatives.
fn better(a: &[Vec<u8>], b: &[Vec<u8>]) -> bool {
    let (la, lb) = (min_len(a).min(16), min_len(b).min(16));
    la > lb || (la == lb && a.len() < b.len())
}

fn product(left: &[Vec<u8>], right: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let mut out = Vec::with_capacity(left.len() * right.len());
    for l in left {
        for r in right {
            let mut joined = l.clone();
            joined.extend_from_slice(r);
            out.push(joined);
        }
    }
    dedup(&mut out);
    out
}

fn dedup(set: &mut Vec<Vec<u8>>) {
    set.sort_unstable();
    set.dedup();
}

/// The strings of a small class, each character UTF-8 encoded (or each byte).
fn class_strings(class: &Class) -> Option<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    match class {
        Class::Unicode(class) => {
            for range in class.ranges() {
                for c in range.start()..=range.end() {
                    if out.len() == MAX_CLASS {
                        return None;
                    }
                    let mut buf = [0; 4];
                    out.push(c.encode_utf8(&mut buf).as_bytes().to_vec());
                }
            }
        }
        Class::Bytes(class) => {
            for range in class.ranges() {
                for b in range.start()..=range.end() {
                    if out.len() == MAX_CLASS {
                        return None;
                    }
                    out.push(vec![b]);
                }
            }
        }
    }
    (!out.is_empty()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn required_of(pattern: &str, case_insensitive: bool) -> Option<Required> {
        let hir = super::super::matcher::parser(case_insensitive)
            .parse(pattern)
            .unwrap();
        required(&hir)
    }

    fn literals(pattern: &str) -> Vec<String> {
        required_of(pattern, false)
            .map(|r| {
                r.literals
                    .iter()
                    .map(|l| String::from_utf8_lossy(l).into_owned())
                    .collect()
            })
            .unwrap_or_default()
    }

    #[test]
    fn a_plain_literal_is_exact() {
        let required = required_of("TODO", false).unwrap();
        assert_eq!(required.literals, vec![b"TODO".to_vec()]);
        assert!(required.exact);
    }

    #[test]
    fn an_inner_literal_after_a_class_is_found() {
        assert_eq!(literals(r"\w+Error\b"), ["Error"]);
        assert!(!required_of(r"\w+Error\b", false).unwrap().exact);
    }

    #[test]
    fn the_longest_required_piece_is_chosen() {
        assert_eq!(literals(r"fn\s+[a-z_]+_mut\s*\("), ["_mut"]);
    }

    #[test]
    fn alternations_of_literals_stay_exact() {
        let required = required_of("foo|bar|bazz", false).unwrap();
        assert_eq!(literals("foo|bar|bazz"), ["bar", "bazz", "foo"]);
        assert!(required.exact);
        assert_eq!(literals("colou?r"), ["color", "colour"]);
        assert_eq!(literals("(get|set)_value"), ["get_value", "set_value"]);
    }

    #[test]
    fn word_boundaries_make_a_literal_inexact() {
        let required = required_of(r"\bfoo\b", false).unwrap();
        assert_eq!(required.literals, vec![b"foo".to_vec()]);
        assert!(!required.exact);
    }

    #[test]
    fn case_insensitive_literals_expand_to_their_case_variants() {
        let required = required_of("err", true).unwrap();
        assert_eq!(required.literals.len(), 8);
        assert!(required.literals.contains(&b"eRr".to_vec()));
        // Too many variants for one run: a shorter piece is searched for instead.
        let long = required_of("connection_refused", true).unwrap();
        assert!(long.literals.len() <= MAX_SET);
        assert!(!long.exact);
    }

    #[test]
    fn nothing_is_required_when_a_branch_can_be_anything() {
        assert_eq!(required_of(r"foo|\w+", false), None);
        assert_eq!(required_of(r"(foo)*", false), None);
        assert_eq!(required_of(r"\w+", false), None);
        assert_eq!(required_of(r"a", false), None);
    }

    #[test]
    fn repetitions_require_their_body() {
        assert_eq!(literals(r"(abc)+x"), ["abc"]);
        assert_eq!(literals(r"x{2}yz"), ["xxyz"]);
    }
}
