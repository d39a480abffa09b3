//! Project instruction files (spec §6.5): `AGENTS.md` plus the active profile's own file,
//! found from the repository root down to the working directory and cut to a 32 KB
//! budget. Reads only through the execution environment; never writes, never starts a
//! process.

use std::path::{Path, PathBuf};

use crate::exec::ExecutionEnvironment;

use super::git::find_git_root;

/// The byte budget of the project instructions (spec §6.5: 32 KB).
pub const PROJECT_DOCS_BUDGET: usize = 32 * 1024;

/// The line that ends project instructions cut at the budget.
pub const PROJECT_DOCS_TRUNCATION_MARKER: &str = "[Project instructions truncated at 32KB]";

/// The instruction file every profile loads.
const UNIVERSAL_FILE: &str = "AGENTS.md";

/// What [`discover_project_docs`] found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct ProjectDocs {
    /// The files whose content is in `text` (wholly, or partly for the one cut by the
    /// budget), in the order they appear: root first, deeper later.
    pub files: Vec<PathBuf>,
    /// Each file under a `## <path>` heading, separated by blank lines; ends with
    /// [`PROJECT_DOCS_TRUNCATION_MARKER`] when cut. Empty when no file was found.
    pub text: String,
    /// Whether the budget cut the text.
    pub truncated: bool,
    /// Instruction files that exist but could not be read (binary, unreadable, not a
    /// regular file), with why.
    /// They are left out of `text`; a host may warn about them.
    pub skipped: Vec<(PathBuf, String)>,
}

impl ProjectDocs {
    /// Whether no instructions were loaded.
    pub fn is_empty(&self) -> bool {
        self.text.is_empty()
    }
}

/// The instruction files a profile loads at each directory level, in loading order:
/// `AGENTS.md` always, then `CLAUDE.md` for `anthropic`, `GEMINI.md` for `gemini`,
/// `.codex/instructions.md` for `openai`. Any other profile id loads `AGENTS.md` only.
pub fn instruction_files(profile_id: &str) -> &'static [&'static str] {
    match profile_id {
        "anthropic" => &[UNIVERSAL_FILE, "CLAUDE.md"],
        "gemini" => &[UNIVERSAL_FILE, "GEMINI.md"],
        "openai" => &[UNIVERSAL_FILE, ".codex/instructions.md"],
        _ => &[UNIVERSAL_FILE],
    }
}

/// Finds and loads the project instruction files for `profile_id` (spec §6.5).
///
/// Walks from the git root (the nearest directory at or above the working directory
/// holding `.git`, found without starting a process) — or from the working directory
/// when there is none — down to the working directory. At each level it loads the
/// [`instruction_files`] of the profile that exist; root files come first, deeper ones
/// after them (so they read as taking precedence). The text is cut at
/// [`PROJECT_DOCS_BUDGET`] bytes on a character boundary and then ends with
/// [`PROJECT_DOCS_TRUNCATION_MARKER`]; files past the cut are not read.
///
/// Reads are bounded and never block (with [`LocalExecutionEnvironment`]): an instruction
/// file that is a FIFO, a socket, a device or a symlink to one (`CLAUDE.md -> /dev/zero`)
/// is refused without being read and listed in [`ProjectDocs::skipped`] with the reason,
/// like a binary file; a huge file is read only as far as the budget.
///
/// [`LocalExecutionEnvironment`]: crate::exec::LocalExecutionEnvironment
pub fn discover_project_docs(env: &dyn ExecutionEnvironment, profile_id: &str) -> ProjectDocs {
    let working_directory = env.working_directory();
    let root = find_git_root(env, working_directory);
    let names = instruction_files(profile_id);
    let mut docs = DocsBuilder::new(PROJECT_DOCS_BUDGET);
    for level in levels(root.as_deref(), working_directory) {
        for name in names {
            if docs.is_full() {
                break;
            }
            let path = level.join(name);
            if !env.file_exists(&path) {
                continue;
            }
            match env.stat(&path) {
                Ok(stat) if stat.is_dir => continue,
                Ok(_) => {}
                Err(error) => {
                    docs.skip(path, error.to_string());
                    continue;
                }
            }
            // Every line is at least one byte, so this many lines hold the budget: a huge
            // file is streamed only that far (and counted), never read whole.
            match env.read_file(&path, None, Some(PROJECT_DOCS_BUDGET)) {
                Ok(content) => docs.push(path, &content.text),
                Err(error) => docs.skip(path, error.to_string()),
            }
        }
    }
    docs.finish()
}

/// The directories from `root` down to `working_directory`, both included. Without a
/// root, or when the working directory is not under it, only the working directory.
fn levels(root: Option<&Path>, working_directory: &Path) -> Vec<PathBuf> {
    let Some(root) = root else {
        return vec![working_directory.to_path_buf()];
    };
    let mut levels: Vec<PathBuf> = Vec::new();
    for dir in working_directory.ancestors() {
        levels.push(dir.to_path_buf());
        if dir == root {
            levels.reverse();
            return levels;
        }
    }
    vec![working_directory.to_path_buf()]
}

/// Assembles the text under a byte budget. Pure: the unit tests drive it directly.
struct DocsBuilder {
    budget: usize,
    docs: ProjectDocs,
}

impl DocsBuilder {
    fn new(budget: usize) -> DocsBuilder {
        DocsBuilder {
            budget,
            docs: ProjectDocs::default(),
        }
    }

    fn is_full(&self) -> bool {
        self.docs.truncated
    }

    fn skip(&mut self, path: PathBuf, reason: String) {
        self.docs.skipped.push((path, reason));
    }

    fn push(&mut self, path: PathBuf, content: &str) {
        if self.docs.truncated {
            return;
        }
        let content = content
            .strip_prefix('\u{feff}')
            .unwrap_or(content)
            .trim_end();
        let mut section = String::with_capacity(content.len() + 64);
        if !self.docs.text.is_empty() {
            section.push_str("\n\n");
        }
        section.push_str("## ");
        section.push_str(&path.display().to_string());
        section.push_str("\n\n");
        section.push_str(content);

        let room = self.budget.saturating_sub(self.docs.text.len());
        if section.len() <= room {
            self.docs.text.push_str(&section);
            self.docs.files.push(path);
            return;
        }
        // Keep part of this file only if some of its content fits, not just its heading.
        let heading_len = section.len() - content.len();
        let cut = floor_char_boundary(&section, room);
        if cut > heading_len {
            self.docs.text.push_str(&section[..cut]);
            self.docs.files.push(path);
        }
        if !self.docs.text.is_empty() && !self.docs.text.ends_with('\n') {
            self.docs.text.push('\n');
        }
        self.docs.text.push_str(PROJECT_DOCS_TRUNCATION_MARKER);
        self.docs.truncated = true;
    }

    fn finish(self) -> ProjectDocs {
        self.docs
    }
}

/// The largest index `<= at` that is a char boundary of `text`.
fn floor_char_boundary(text: &str, at: usize) -> usize {
    if at >= text.len() {
        return text.len();
    }
    (0..=at)
        .rev()
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_profile_loads_agents_md_and_only_its_own_file() {
        assert_eq!(instruction_files("anthropic"), ["AGENTS.md", "CLAUDE.md"]);
        assert_eq!(instruction_files("gemini"), ["AGENTS.md", "GEMINI.md"]);
        assert_eq!(
            instruction_files("openai"),
            ["AGENTS.md", ".codex/instructions.md"]
        );
        assert_eq!(instruction_files("custom"), ["AGENTS.md"]);
    }

    #[test]
    fn levels_run_from_the_root_down_to_the_working_directory() {
        let levels = levels(Some(Path::new("/r")), Path::new("/r/a/b"));
        assert_eq!(
            levels,
            [Path::new("/r"), Path::new("/r/a"), Path::new("/r/a/b")]
        );
    }

    #[test]
    fn without_a_root_only_the_working_directory_is_searched() {
        assert_eq!(levels(None, Path::new("/w/x")), [Path::new("/w/x")]);
        assert_eq!(
            levels(Some(Path::new("/elsewhere")), Path::new("/w/x")),
            [Path::new("/w/x")]
        );
    }

    #[test]
    fn files_are_headed_by_their_path_in_push_order() {
        let mut builder = DocsBuilder::new(PROJECT_DOCS_BUDGET);
        builder.push("/r/AGENTS.md".into(), "\u{feff}root rules\n\n");
        builder.push("/r/sub/AGENTS.md".into(), "sub rules");
        let docs = builder.finish();
        assert_eq!(
            docs.text,
            "## /r/AGENTS.md\n\nroot rules\n\n## /r/sub/AGENTS.md\n\nsub rules"
        );
        assert_eq!(
            docs.files,
            [Path::new("/r/AGENTS.md"), Path::new("/r/sub/AGENTS.md")]
        );
        assert!(!docs.truncated);
    }

    #[test]
    fn text_over_budget_is_cut_on_a_char_boundary_and_marked() {
        let budget = 100;
        let mut builder = DocsBuilder::new(budget);
        builder.push("/r/AGENTS.md".into(), &"é".repeat(200));
        builder.push("/r/sub/AGENTS.md".into(), "never read");
        let docs = builder.finish();
        assert!(docs.truncated);
        let (kept, marker) = docs.text.rsplit_once('\n').unwrap();
        assert_eq!(marker, PROJECT_DOCS_TRUNCATION_MARKER);
        assert!(
            kept.len() <= budget && kept.len() >= budget - 1,
            "{}",
            kept.len()
        );
        assert!(kept.starts_with("## /r/AGENTS.md\n\néé"));
        assert_eq!(docs.files, [Path::new("/r/AGENTS.md")]);
    }

    #[test]
    fn a_file_that_fits_exactly_is_not_marked_truncated() {
        let section_overhead = "## /a\n\n".len();
        let mut builder = DocsBuilder::new(section_overhead + 10);
        builder.push("/a".into(), "0123456789");
        let docs = builder.finish();
        assert!(!docs.truncated);
        assert_eq!(docs.text, "## /a\n\n0123456789");
    }

    #[test]
    fn a_file_cut_inside_its_heading_is_left_out_entirely() {
        let first = "## /a\n\nxy";
        let mut builder = DocsBuilder::new(first.len() + 6);
        builder.push("/a".into(), "xy");
        builder.push("/b".into(), "more");
        let docs = builder.finish();
        assert!(docs.truncated);
        assert_eq!(docs.files, [Path::new("/a")]);
        assert_eq!(
            docs.text,
            format!("{first}\n{PROJECT_DOCS_TRUNCATION_MARKER}")
        );
    }

    #[test]
    fn a_file_cut_before_its_first_byte_is_not_listed() {
        let first = "## /a\n\nxy";
        let mut builder = DocsBuilder::new(first.len());
        builder.push("/a".into(), "xy");
        builder.push("/b".into(), "more");
        let docs = builder.finish();
        assert!(docs.truncated);
        assert_eq!(docs.files, [Path::new("/a")]);
        assert_eq!(
            docs.text,
            format!("{first}\n{PROJECT_DOCS_TRUNCATION_MARKER}")
        );
    }
}
