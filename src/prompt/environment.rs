//! The environment context block (spec §6.3): where the agent runs, what day it is, which
//! model it is. Captured once at session start; never re-read during a session, so the
//! system prompt keeps the same bytes on every round (a stable prefix for prompt caching).

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::exec::ExecutionEnvironment;

use super::git::{self, GitSnapshot, SnapshotOutcome};

/// What the agent is told about its surroundings, captured once when a session starts.
///
/// Build it with [`EnvironmentContext::capture`] (or [`capture_at`](Self::capture_at) with
/// an explicit clock); adjust any field afterwards if the host knows better, then render
/// it with [`render`](Self::render). Every field is plain data: rendering the same value
/// twice gives the same bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct EnvironmentContext {
    /// The working directory of the execution environment.
    pub working_directory: PathBuf,
    /// Whether the working directory is inside a git work tree: a `.git` entry exists at
    /// or above it, and git, when it can run, does not deny it.
    pub is_git_repository: bool,
    /// The checked-out branch (`"HEAD detached at 1a2b3c4"` when detached), if known.
    pub git_branch: Option<String>,
    /// `"linux"`, `"darwin"`, `"windows"`, … as the environment reports it.
    pub platform: String,
    /// The environment's OS version string.
    pub os_version: String,
    /// Today's date in UTC, `YYYY-MM-DD`.
    pub today: String,
    /// The model identifier sent to the provider.
    pub model_id: String,
    /// A human-readable model name (see [`model_display_name`]).
    pub model_display_name: String,
    /// The model's training knowledge cutoff, advisory (see [`knowledge_cutoff`]).
    pub knowledge_cutoff: String,
    /// The git snapshot (§6.4), when the directory is a repository and git answered.
    pub git: Option<GitSnapshot>,
}

impl EnvironmentContext {
    /// Captures the context now, through `env` only (git runs via
    /// [`ExecutionEnvironment::exec_command`]; nothing is spawned directly).
    pub fn capture(env: &dyn ExecutionEnvironment, model_id: &str) -> EnvironmentContext {
        EnvironmentContext::capture_at(env, model_id, SystemTime::now())
    }

    /// Captures the context with `now` as the current time (for reproducible prompts and
    /// tests).
    ///
    /// The git snapshot costs one short command, and only when a `.git` entry exists in
    /// the working directory or above it. If git is missing, fails or exceeds
    /// [`GIT_SNAPSHOT_TIMEOUT`](super::GIT_SNAPSHOT_TIMEOUT), the branch is read from
    /// `.git/HEAD` instead and the snapshot is left out; capture itself never fails.
    pub fn capture_at(
        env: &dyn ExecutionEnvironment,
        model_id: &str,
        now: SystemTime,
    ) -> EnvironmentContext {
        let working_directory = env.working_directory().to_path_buf();
        // No `.git` at or above the directory: not a repository, and no process needed.
        let mut git_root = git::find_git_root(env, &working_directory);
        let snapshot = match &git_root {
            Some(_) => match git::capture_snapshot(env) {
                SnapshotOutcome::Captured(snapshot) => Some(snapshot),
                SnapshotOutcome::NotARepository => {
                    // A `.git` entry git does not recognise (or one that git ignores,
                    // as inside the `.git` directory itself): trust git.
                    git_root = None;
                    None
                }
                SnapshotOutcome::Unavailable => None,
            },
            None => None,
        };
        let git_branch = match (&snapshot, &git_root) {
            (Some(snapshot), _) if snapshot.branch.is_some() => snapshot.branch.clone(),
            (_, Some(root)) => git::branch_from_head_file(env, root),
            (_, None) => None,
        };
        EnvironmentContext {
            working_directory,
            is_git_repository: git_root.is_some(),
            git_branch,
            platform: env.platform(),
            os_version: env.os_version(),
            today: format_date(now),
            model_id: model_id.to_string(),
            model_display_name: model_display_name(model_id),
            knowledge_cutoff: knowledge_cutoff(model_id).to_string(),
            git: snapshot,
        }
    }

    /// Renders the `<environment>` block with the spec's fields in the spec's order, then
    /// the git snapshot in its own `<git>` block when there is one.
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(512);
        self.render_into(&mut out);
        out
    }

    pub(crate) fn render_into(&self, out: &mut String) {
        let branch = match (&self.git_branch, self.is_git_repository) {
            (Some(branch), _) => branch.as_str(),
            (None, true) => "unknown",
            (None, false) => "none",
        };
        let model =
            if self.model_display_name.is_empty() || self.model_display_name == self.model_id {
                self.model_id.clone()
            } else {
                format!("{} ({})", self.model_display_name, self.model_id)
            };
        let lines: [(&str, &str); 8] = [
            ("Working directory", &display_path(&self.working_directory)),
            (
                "Is git repository",
                if self.is_git_repository {
                    "true"
                } else {
                    "false"
                },
            ),
            ("Git branch", branch),
            ("Platform", &self.platform),
            ("OS version", &self.os_version),
            ("Today's date", &self.today),
            ("Model", &model),
            ("Knowledge cutoff", &self.knowledge_cutoff),
        ];
        out.push_str("<environment>\n");
        for (name, value) in lines {
            out.push_str(name);
            out.push_str(": ");
            out.push_str(one_line(value));
            out.push('\n');
        }
        out.push_str("</environment>");
        if let Some(snapshot) = &self.git {
            out.push_str("\n\n");
            snapshot.render_into(out);
        }
    }
}

fn display_path(path: &Path) -> String {
    path.display().to_string()
}

/// The first line of `value`: a field value never breaks the block's one-field-per-line
/// shape, whatever an environment reports.
fn one_line(value: &str) -> &str {
    value.lines().next().unwrap_or("").trim_end()
}

/// Formats `time` as a UTC calendar date, `YYYY-MM-DD`. Times before 1970 give
/// `1970-01-01`.
///
/// ```
/// use std::time::{Duration, UNIX_EPOCH};
/// let leap_day = UNIX_EPOCH + Duration::from_secs(951_782_400);
/// assert_eq!(agentloop::unstable::format_date(leap_day), "2000-02-29");
/// ```
pub fn format_date(time: SystemTime) -> String {
    crate::time::format_date(time)
}

/// Training knowledge cutoffs by model-id prefix; the longest matching prefix wins.
///
/// Advisory only: taken from the providers' model pages when this table was written, it
/// goes stale as models ship, and a model id it does not know gets `"unknown"`. A host
/// that knows better sets [`EnvironmentContext::knowledge_cutoff`] itself.
const KNOWLEDGE_CUTOFFS: &[(&str, &str)] = &[
    ("claude-fable-5-1", "June 2026"),
    ("claude-opus-5-5", "June 2026"),
    ("claude-sonnet-5-5", "June 2026"),
    ("claude-opus-5", "May 2026"),
    ("claude-sonnet-5", "January 2026"),
    ("claude-opus-4-6", "May 2025"),
    ("claude-sonnet-4-5", "January 2025"),
    ("claude-haiku-4-5", "February 2025"),
    ("gpt-5.4", "August 2025"),
    ("gpt-5.2", "August 2025"),
    ("gpt-5.1", "September 2024"),
    ("gpt-5-mini", "May 2024"),
    ("gpt-5-nano", "May 2024"),
    ("gpt-5-codex", "September 2024"),
    ("gpt-5", "September 2024"),
    ("gemini-3.1-pro", "January 2025"),
    ("gemini-3-pro", "January 2025"),
    ("gemini-3-flash", "January 2025"),
    ("gemini-2.5", "January 2025"),
];

/// The advisory knowledge cutoff of a model id, `"unknown"` when the small built-in table
/// has no entry for it (see the note on accuracy at [`EnvironmentContext::knowledge_cutoff`]).
///
/// ```
/// assert_eq!(agentloop::unstable::knowledge_cutoff("claude-sonnet-4-5-20250929"), "January 2025");
/// assert_eq!(agentloop::unstable::knowledge_cutoff("my-local-model"), "unknown");
/// ```
pub fn knowledge_cutoff(model_id: &str) -> &'static str {
    let id = model_id.trim().to_ascii_lowercase();
    KNOWLEDGE_CUTOFFS
        .iter()
        .filter(|(prefix, _)| id.starts_with(prefix))
        .max_by_key(|(prefix, _)| prefix.len())
        .map_or("unknown", |(_, cutoff)| cutoff)
}

/// A readable name for a model id of a known family; other ids are returned unchanged.
///
/// `claude-opus-4-6` → `Claude Opus 4.6`, `claude-sonnet-4-5-20250929` → `Claude Sonnet 4.5`,
/// `gpt-5.2-codex` → `GPT-5.2-Codex`, `gemini-3-pro-preview` → `Gemini 3 Pro Preview`.
///
/// ```
/// assert_eq!(agentloop::unstable::model_display_name("claude-opus-4-6"), "Claude Opus 4.6");
/// ```
pub fn model_display_name(model_id: &str) -> String {
    let id = model_id.trim();
    if let Some(rest) = id.strip_prefix("claude-") {
        spaced_name("Claude", rest)
    } else if let Some(rest) = id.strip_prefix("gemini-") {
        spaced_name("Gemini", rest)
    } else if let Some(rest) = id.strip_prefix("gpt-") {
        let mut name = String::from("GPT");
        for token in rest.split('-') {
            name.push('-');
            name.push_str(&capitalize(token));
        }
        name
    } else {
        id.to_string()
    }
}

/// `family` then the tokens of `rest`: words capitalised, runs of numbers joined with dots
/// (`4-5` → `4.5`), a trailing 8-digit release date dropped.
fn spaced_name(family: &str, rest: &str) -> String {
    let mut tokens: Vec<&str> = rest.split('-').filter(|t| !t.is_empty()).collect();
    if tokens
        .last()
        .is_some_and(|t| t.len() == 8 && t.bytes().all(|b| b.is_ascii_digit()))
    {
        tokens.pop();
    }
    let mut name = String::from(family);
    let mut previous_numeric = false;
    for token in tokens {
        let numeric = token.bytes().all(|b| b.is_ascii_digit() || b == b'.');
        if numeric && previous_numeric {
            name.push('.');
        } else {
            name.push(' ');
        }
        name.push_str(&capitalize(token));
        previous_numeric = numeric;
    }
    name
}

fn capitalize(word: &str) -> String {
    let mut chars = word.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    fn date_of(seconds: u64) -> String {
        format_date(UNIX_EPOCH + Duration::from_secs(seconds))
    }

    #[test]
    fn dates_match_known_calendar_days() {
        let cases = [
            (0, "1970-01-01"),
            (86_399, "1970-01-01"),
            (86_400, "1970-01-02"),
            (951_782_400, "2000-02-29"),
            (951_868_800, "2000-03-01"),
            (1_709_164_800, "2024-02-29"),
            (1_735_689_599, "2024-12-31"),
            (1_735_689_600, "2025-01-01"),
            (4_107_542_400, "2100-03-01"),
            (253_402_300_799, "9999-12-31"),
        ];
        for (seconds, expected) in cases {
            assert_eq!(date_of(seconds), expected, "at {seconds} s");
        }
    }

    #[test]
    fn times_before_the_epoch_clamp_to_the_epoch() {
        assert_eq!(
            format_date(UNIX_EPOCH - Duration::from_secs(3600)),
            "1970-01-01"
        );
    }

    #[test]
    fn knowledge_cutoff_uses_the_longest_matching_prefix() {
        assert_eq!(knowledge_cutoff("claude-opus-4-6"), "May 2025");
        assert_eq!(knowledge_cutoff("claude-opus-5-5"), "June 2026");
        assert_eq!(knowledge_cutoff("claude-opus-5"), "May 2026");
        assert_eq!(knowledge_cutoff("gpt-5-mini-2025-08-07"), "May 2024");
        assert_eq!(knowledge_cutoff("gpt-5"), "September 2024");
        assert_eq!(knowledge_cutoff("gpt-5.2-codex"), "August 2025");
        assert_eq!(knowledge_cutoff("gemini-3-pro-preview"), "January 2025");
        assert_eq!(knowledge_cutoff("GPT-5.1"), "September 2024");
    }

    #[test]
    fn unknown_models_have_an_unknown_cutoff() {
        assert_eq!(knowledge_cutoff("llama-3-70b"), "unknown");
        assert_eq!(knowledge_cutoff(""), "unknown");
        assert_eq!(knowledge_cutoff("claude"), "unknown");
    }

    #[test]
    fn display_names_of_known_families_are_readable() {
        let cases = [
            ("claude-opus-4-6", "Claude Opus 4.6"),
            ("claude-sonnet-4-5-20250929", "Claude Sonnet 4.5"),
            ("claude-3-5-sonnet-20241022", "Claude 3.5 Sonnet"),
            ("claude-opus-5", "Claude Opus 5"),
            ("gpt-5", "GPT-5"),
            ("gpt-5.2-codex", "GPT-5.2-Codex"),
            ("gemini-3-pro-preview", "Gemini 3 Pro Preview"),
            ("gemini-2.5-flash", "Gemini 2.5 Flash"),
            ("qwen3-coder", "qwen3-coder"),
            ("", ""),
        ];
        for (id, expected) in cases {
            assert_eq!(model_display_name(id), expected, "for {id:?}");
        }
    }

    fn sample_context() -> EnvironmentContext {
        EnvironmentContext {
            working_directory: PathBuf::from("/work/project"),
            is_git_repository: true,
            git_branch: Some("main".into()),
            platform: "linux".into(),
            os_version: "Linux 6.8.0".into(),
            today: "2026-11-20".into(),
            model_id: "claude-opus-4-6".into(),
            model_display_name: "Claude Opus 4.6".into(),
            knowledge_cutoff: "May 2025".into(),
            git: None,
        }
    }

    #[test]
    fn the_environment_block_has_the_spec_fields_in_the_spec_order() {
        let expected = "<environment>\n\
            Working directory: /work/project\n\
            Is git repository: true\n\
            Git branch: main\n\
            Platform: linux\n\
            OS version: Linux 6.8.0\n\
            Today's date: 2026-11-20\n\
            Model: Claude Opus 4.6 (claude-opus-4-6)\n\
            Knowledge cutoff: May 2025\n\
            </environment>";
        assert_eq!(sample_context().render(), expected);
    }

    #[test]
    fn a_directory_outside_git_says_so_in_the_branch_field() {
        let mut context = sample_context();
        context.is_git_repository = false;
        context.git_branch = None;
        let text = context.render();
        assert!(text.contains("Is git repository: false\nGit branch: none\n"));
    }

    #[test]
    fn a_multi_line_field_value_cannot_break_the_block() {
        let mut context = sample_context();
        context.os_version = "Linux 6.8\nInjected: yes".into();
        let text = context.render();
        assert!(text.contains("OS version: Linux 6.8\nToday's date"));
        assert!(!text.contains("Injected"));
    }
}
