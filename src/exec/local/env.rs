//! Environment filtering for commands (spec §4.2): which variables of the base environment
//! a command inherits under an [`EnvPolicy`].
//!
//! Pure functions over maps: this module never reads or changes the process environment.
//!
//! The order of the rules, first match wins:
//!
//! 1. a name matching an `exclude` pattern is dropped;
//! 2. a name matching an `include` pattern is kept (explicit is allowed, secrets included);
//! 3. a core name ([`is_core_name`]: `PATH`, `HOME`, `LANG`, `LC_*`, toolchain homes…) is kept,
//!    unless the policy inherits nothing;
//! 4. a name that says it holds a secret ([`is_secret_name`]) is dropped;
//! 5. a value that looks like a credential ([`looks_like_credential`]) is dropped;
//! 6. everything else is kept under [`EnvInherit::All`] and dropped otherwise.

use std::collections::BTreeMap;

use crate::exec::{EnvInherit, EnvPolicy};

/// Names a command always inherits unless the policy inherits nothing: what shells, locales
/// and language toolchains need to work. `*` matches any run of characters.
const CORE_NAMES: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "LC_*",
    "TERM",
    "COLORTERM",
    "TMPDIR",
    "TMP",
    "TEMP",
    "TZ",
    "XDG_*",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "GOPATH",
    "GOROOT",
    "GOBIN",
    "GOCACHE",
    "GOMODCACHE",
    "CARGO_HOME",
    "RUSTUP_HOME",
    "RUSTUP_TOOLCHAIN",
    "NVM_DIR",
    "NVM_BIN",
    "NODE_PATH",
    "VOLTA_HOME",
    "PNPM_HOME",
    "BUN_INSTALL",
    "DENO_DIR",
    "JAVA_HOME",
    "SDKMAN_DIR",
    "GRADLE_USER_HOME",
    "MAVEN_HOME",
    "PYENV_ROOT",
    "PYTHONPATH",
    "VIRTUAL_ENV",
    "CONDA_PREFIX",
    "CONDA_DEFAULT_ENV",
    "RBENV_ROOT",
    "GEM_HOME",
    "GEM_PATH",
    "ASDF_DIR",
    "ASDF_DATA_DIR",
];

/// Name suffixes that mark a secret (case-insensitive). The spec's five, plus the other
/// common spellings of access keys. A name equal to a suffix without its leading
/// underscore (`TOKEN`, `API_KEY`, `PASSWORD`) is a secret too.
const SECRET_SUFFIXES: &[&str] = &[
    "_API_KEY",
    "_SECRET",
    "_TOKEN",
    "_PASSWORD",
    "_CREDENTIAL",
    "_APIKEY",
    "_ACCESS_KEY",
    "_SECRET_KEY",
    "_PRIVATE_KEY",
    "_PASSWD",
];

/// Matches `name` against a pattern where `*` stands for any run of characters, ignoring
/// ASCII case.
pub(crate) fn name_matches(pattern: &str, name: &str) -> bool {
    let (p, n) = (pattern.as_bytes(), name.as_bytes());
    // Iterative wildcard matching with one backtrack point: O(len(p) * len(n)) worst case.
    let (mut pi, mut ni) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, ni));
            pi += 1;
        } else if pi < p.len() && p[pi].eq_ignore_ascii_case(&n[ni]) {
            pi += 1;
            ni += 1;
        } else if let Some((sp, sn)) = star {
            pi = sp + 1;
            ni = sn + 1;
            star = Some((sp, sn + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

/// Whether `name` is one of the core variables every command needs (see the module docs).
pub(crate) fn is_core_name(name: &str) -> bool {
    CORE_NAMES.iter().any(|pattern| name_matches(pattern, name))
}

/// Whether `name` says it holds a secret: it ends with `_API_KEY`, `_SECRET`, `_TOKEN`,
/// `_PASSWORD`, `_CREDENTIAL`, `_APIKEY`, `_ACCESS_KEY`, `_SECRET_KEY`, `_PRIVATE_KEY` or
/// `_PASSWD`, or is one of those without the underscore, ignoring case.
pub(crate) fn is_secret_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    SECRET_SUFFIXES
        .iter()
        .any(|suffix| upper.ends_with(suffix) || upper == suffix[1..])
}

/// Whether `value` contains something shaped like a well-known credential: an OpenAI or
/// Anthropic key (`sk-…`), a GitHub token (`ghp_`, `gho_`, `ghu_`, `ghs_`, `ghr_`,
/// `github_pat_`), a Slack token (`xoxb-`, `xoxp-`, …), an AWS access key id (`AKIA…`,
/// `ASIA…`), a Google API key (`AIza…`), a GitLab token (`glpat-`), a Stripe live key, or a
/// PEM private key block.
pub(crate) fn looks_like_credential(value: &str) -> bool {
    let bytes = value.as_bytes();
    (0..bytes.len()).any(|at| {
        let rest = &bytes[at..];
        match (rest[0], rest.get(1).copied().unwrap_or(0)) {
            // The first two bytes of the shapes' prefixes; anything else starts none.
            (b's' | b'r', b'k')
            | (b'g', b'h' | b'i' | b'l')
            | (b'x', b'o')
            | (b'A', b'K' | b'S' | b'I') => {
                let starts_a_word = at == 0 || !is_word(bytes[at - 1]);
                starts_a_word && SHAPES.iter().any(|shape| shape.matches(rest))
            }
            (b'-', _) => pem_private_key(rest),
            _ => false,
        }
    })
}

/// A credential shape: one of `prefixes` at the start of a word, then at least `min`
/// bytes of `class` (exactly `min`, then the word's end, when `exact`).
///
/// Written out instead of a regex: the alternation with word boundaries took 1.6 million
/// instructions to compile, two thirds of the CLI's start-up work.
struct Shape {
    prefixes: &'static [&'static str],
    class: fn(u8) -> bool,
    min: usize,
    exact: bool,
}

const SHAPES: &[Shape] = &[
    Shape::at_least(&["sk-"], |b| is_word(b) || b == b'-', 20),
    Shape::at_least(
        &["ghp_", "gho_", "ghu_", "ghs_", "ghr_"],
        |b| b.is_ascii_alphanumeric(),
        30,
    ),
    Shape::at_least(&["github_pat_"], is_word, 22),
    Shape::at_least(
        &["xoxa-", "xoxb-", "xoxp-", "xoxo-", "xoxs-", "xoxr-"],
        |b| b.is_ascii_alphanumeric() || b == b'-',
        10,
    ),
    Shape {
        prefixes: &["AKIA", "ASIA"],
        class: |b| b.is_ascii_digit() || b.is_ascii_uppercase(),
        min: 16,
        exact: true,
    },
    Shape::at_least(&["AIza"], |b| is_word(b) || b == b'-', 30),
    Shape::at_least(&["glpat-"], |b| is_word(b) || b == b'-', 20),
    Shape::at_least(&["rk_live_", "sk_live_"], |b| b.is_ascii_alphanumeric(), 20),
];

impl Shape {
    const fn at_least(
        prefixes: &'static [&'static str],
        class: fn(u8) -> bool,
        min: usize,
    ) -> Shape {
        Shape {
            prefixes,
            class,
            min,
            exact: false,
        }
    }

    /// Whether `text` starts with this shape.
    fn matches(&self, text: &[u8]) -> bool {
        self.prefixes.iter().any(|prefix| {
            let Some(body) = text.strip_prefix(prefix.as_bytes()) else {
                return false;
            };
            let run = body.iter().take_while(|&&b| (self.class)(b)).count();
            if self.exact {
                run >= self.min && body.get(self.min).is_none_or(|&b| !is_word(b))
            } else {
                run >= self.min
            }
        })
    }
}

/// Whether `text` starts with a PEM private key header: `-----BEGIN`, capitals and spaces
/// ending in `PRIVATE KEY`, then `-----`.
fn pem_private_key(text: &[u8]) -> bool {
    let Some(body) = text.strip_prefix(b"-----BEGIN") else {
        return false;
    };
    let run = body
        .iter()
        .take_while(|&&b| b.is_ascii_uppercase() || b == b' ')
        .count();
    body[..run].ends_with(b"PRIVATE KEY") && body[run..].starts_with(b"-----")
}

/// An ASCII word byte (what a regex `\b` without Unicode looks at).
fn is_word(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// Whether a command inherits `name=value` under `policy` (the rules in the module docs).
pub(crate) fn keeps(policy: &EnvPolicy, name: &str, value: &str) -> bool {
    if policy.exclude.iter().any(|p| name_matches(p, name)) {
        return false;
    }
    if policy.include.iter().any(|p| name_matches(p, name)) {
        return true;
    }
    if policy.inherit == EnvInherit::Nothing {
        return false;
    }
    if is_core_name(name) {
        return true;
    }
    if is_secret_name(name) || looks_like_credential(value) {
        return false;
    }
    policy.inherit == EnvInherit::All
}

/// The variables of `base` a command inherits under `policy`.
pub(crate) fn filter(
    base: &BTreeMap<String, String>,
    policy: &EnvPolicy,
) -> BTreeMap<String, String> {
    base.iter()
        .filter(|(name, value)| keeps(policy, name, value))
        .map(|(name, value)| (name.clone(), value.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcard_names_match_ignoring_case() {
        assert!(name_matches("LC_*", "LC_ALL"));
        assert!(name_matches("lc_*", "LC_ALL"));
        assert!(name_matches("*_TOKEN", "GH_TOKEN"));
        assert!(name_matches("A*B*C", "AxxBxxBxC"));
        assert!(!name_matches("LC_*", "XLC_ALL"));
        assert!(!name_matches("PATH", "PATHX"));
        assert!(name_matches("*", ""));
    }

    #[test]
    fn secret_names_are_recognised_by_suffix_and_bare_name() {
        for name in [
            "ANTHROPIC_API_KEY",
            "openai_api_key",
            "MY_SECRET",
            "GITHUB_TOKEN",
            "DB_PASSWORD",
            "GCP_CREDENTIAL",
            "AWS_SECRET_ACCESS_KEY",
            "TOKEN",
            "API_KEY",
            "Password",
        ] {
            assert!(is_secret_name(name), "{name}");
        }
        for name in ["PATH", "TOKENIZER_PATH", "SECRETARY", "KEYBOARD", "HOME"] {
            assert!(!is_secret_name(name), "{name}");
        }
    }

    #[test]
    fn credential_shaped_values_are_recognised_anywhere_in_the_value() {
        let ghp = format!("ghp_{}", "a".repeat(36));
        for value in [
            ghp.as_str(),
            "sk-ant-api03-abcdefghijklmnopqrstuvwxyz",
            "Bearer sk-proj-ABCDEFGHIJKLMNOPQRSTUV",
            "xoxb-1234567890-abcdef",
            "AKIAIOSFODNN7EXAMPLE",
            "AIzaSyA1234567890abcdefghijklmnopqrstu",
            "-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n",
            "-----BEGIN PRIVATE KEY-----",
        ] {
            assert!(looks_like_credential(value), "{value}");
        }
        for value in [
            "/usr/bin:/bin",
            "risk-assessment-for-the-quarterly-report",
            "en_US.UTF-8",
            "ghp_short",
            "xterm-256color",
        ] {
            assert!(!looks_like_credential(value), "{value}");
        }
    }

    /// The shapes as the regex they were written as before (ASCII word boundaries), the
    /// reference the matcher must agree with.
    const REFERENCE: &str = r"(?x-u)
          \bsk-[A-Za-z0-9_\-]{20,}
        | \bgh[pousr]_[A-Za-z0-9]{30,}
        | \bgithub_pat_[A-Za-z0-9_]{22,}
        | \bxox[abposr]-[A-Za-z0-9\-]{10,}
        | \b(?:AKIA|ASIA)[0-9A-Z]{16}\b
        | \bAIza[0-9A-Za-z_\-]{30,}
        | \bglpat-[A-Za-z0-9_\-]{20,}
        | \b[rs]k_live_[A-Za-z0-9]{20,}
        | -----BEGIN[A-Z\ ]*PRIVATE\ KEY-----";

    #[test]
    fn the_matcher_agrees_with_the_reference_regex_on_generated_values() {
        let reference = regex::Regex::new(REFERENCE).unwrap();
        let pieces = [
            "sk-",
            "ghp_",
            "gho_",
            "ghx_",
            "github_pat_",
            "xoxb-",
            "xoxz-",
            "AKIA",
            "ASIA",
            "AIza",
            "glpat-",
            "rk_live_",
            "sk_live_",
            "-----BEGIN",
            " RSA",
            " PRIVATE KEY",
            "PRIVATE KEY",
            "-----",
            "a",
            "Z",
            "7",
            "_",
            "-",
            " ",
            "é",
            ".",
            "\n",
            "0123456789",
            "ABCDEFGHIJKLMNOP",
            "abcdefghijklmnopqrstuvwxyz",
            "Q",
        ];
        // A small deterministic generator (xorshift): 60,000 values of 1 to 12 pieces.
        let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut matched = 0;
        for _ in 0..60_000 {
            let count = 1 + (next() % 12) as usize;
            let mut value = String::new();
            for _ in 0..count {
                let piece = pieces[(next() % pieces.len() as u64) as usize];
                let times = 1 + (next() % 3) as usize;
                value.push_str(&piece.repeat(times));
            }
            let expected = reference.is_match(&value);
            assert_eq!(looks_like_credential(&value), expected, "{value:?}");
            matched += usize::from(expected);
        }
        assert!(
            matched > 1_000,
            "the generator reaches the shapes: {matched}"
        );
    }

    fn base() -> BTreeMap<String, String> {
        [
            ("PATH", "/usr/bin:/bin"),
            ("HOME", "/home/u"),
            ("LC_ALL", "C"),
            ("ANTHROPIC_API_KEY", "sk-ant-xyz"),
            ("EDITOR", "vi"),
            ("HARMLESS", "sk-abcdefghijklmnopqrstuvwxyz"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }

    fn names(map: &BTreeMap<String, String>) -> Vec<&str> {
        map.keys().map(String::as_str).collect()
    }

    #[test]
    fn inherit_all_drops_secrets_by_name_and_by_value() {
        let kept = filter(&base(), &EnvPolicy::inherit_all());
        assert_eq!(names(&kept), ["EDITOR", "HOME", "LC_ALL", "PATH"]);
    }

    #[test]
    fn core_only_keeps_core_names() {
        let kept = filter(&base(), &EnvPolicy::core_only());
        assert_eq!(names(&kept), ["HOME", "LC_ALL", "PATH"]);
    }

    #[test]
    fn inherit_nothing_keeps_only_includes() {
        let kept = filter(&base(), &EnvPolicy::nothing());
        assert!(kept.is_empty());
        let kept = filter(&base(), &EnvPolicy::nothing().include("PATH"));
        assert_eq!(names(&kept), ["PATH"]);
    }

    #[test]
    fn include_beats_the_secret_rules_and_exclude_beats_everything() {
        let policy = EnvPolicy::inherit_all()
            .include("ANTHROPIC_API_KEY")
            .exclude("LC_*")
            .exclude("editor");
        let kept = filter(&base(), &policy);
        assert_eq!(names(&kept), ["ANTHROPIC_API_KEY", "HOME", "PATH"]);
    }
}
