//! System prompt construction (spec §6): the five layers, the environment context block,
//! the git snapshot and project instruction discovery.
//!
//! Everything here is a plain function of explicit inputs. What needs the outside world
//! ([`EnvironmentContext::capture`], [`discover_project_docs`]) reads it only through an
//! [`ExecutionEnvironment`](crate::exec::ExecutionEnvironment), once, at session start;
//! [`build_system_prompt`] then assembles bytes that depend on nothing else, so every
//! round of a session sends the same system prompt (a stable prefix for prompt caching).
//! This module never spawns processes, reads environment variables, or keeps state.
//!
//! Hosts get all of it through [`ProviderProfile`](crate::profiles::ProviderProfile); the
//! bench and the tests reach it through [`unstable`](crate::unstable), outside semver.
//!
//! ```
//! use agentloop::unstable::{build_system_prompt, base_instructions, ProjectDocs};
//! # fn demo(env: &dyn agentloop::exec::ExecutionEnvironment) {
//! let context = agentloop::unstable::EnvironmentContext::capture(env, "claude-opus-4-6");
//! let docs = agentloop::unstable::discover_project_docs(env, "anthropic");
//! let base = base_instructions("anthropic").unwrap();
//! let prompt = build_system_prompt(base, &context, &[], &docs, Some("Answer in French."));
//! assert!(prompt.ends_with("Answer in French.\n"));
//! # }
//! ```

pub(crate) mod environment;
pub(crate) mod git;
pub(crate) mod project_docs;

pub use environment::EnvironmentContext;
pub use git::{GIT_SNAPSHOT_TIMEOUT, GitSnapshot, GitStatusCounts};
pub use project_docs::discover_project_docs;
pub use project_docs::{PROJECT_DOCS_BUDGET, PROJECT_DOCS_TRUNCATION_MARKER, ProjectDocs};

use crate::llm::ToolDefinition;

const OPENAI_BASE: &str = include_str!("../profiles/prompts/openai.md");
const ANTHROPIC_BASE: &str = include_str!("../profiles/prompts/anthropic.md");
const GEMINI_BASE: &str = include_str!("../profiles/prompts/gemini.md");

/// The built-in base instructions (layer 1) of a profile: `"openai"`, `"anthropic"` or
/// `"gemini"`; `None` for any other id.
///
/// Written for this crate in its own words, each covers the topics its provider's native
/// agent covers (identity, tool use, the profile's editing format, coding practice).
pub fn base_instructions(profile_id: &str) -> Option<&'static str> {
    match profile_id {
        "openai" => Some(OPENAI_BASE),
        "anthropic" => Some(ANTHROPIC_BASE),
        "gemini" => Some(GEMINI_BASE),
        _ => None,
    }
}

/// The heading of the tool descriptions layer.
const TOOLS_HEADING: &str = "# Tools";
/// The heading of the project instructions layer.
const PROJECT_HEADING: &str = "# Project instructions";
/// The heading of the host's override layer.
const OVERRIDE_HEADING: &str = "# Instructions for this session";

/// Assembles the system prompt from its five layers (spec §6.1), later layers taking
/// precedence:
///
/// 1. `base` — the profile's base instructions ([`base_instructions`]);
/// 2. the environment context: the `<environment>` block and the `<git>` snapshot;
/// 3. a `# Tools` section listing each tool's name and the first paragraph of its
///    description, in the order given (the full schemas travel in the request);
/// 4. a `# Project instructions` section with `project_docs` (omitted when empty);
/// 5. the host's `user_override`, last (omitted when `None` or blank).
///
/// Layers are separated by one blank line and the result ends with a newline. The output
/// depends only on the arguments: the same inputs always give the same bytes.
pub fn build_system_prompt(
    base: &str,
    env_ctx: &EnvironmentContext,
    tools: &[ToolDefinition],
    project_docs: &ProjectDocs,
    user_override: Option<&str>,
) -> String {
    let mut out = String::with_capacity(
        base.len() + project_docs.text.len() + user_override.map_or(0, str::len) + 2048,
    );
    let base = base.trim();
    if !base.is_empty() {
        out.push_str(base);
        out.push_str("\n\n");
    }

    env_ctx.render_into(&mut out);
    out.push('\n');

    if !tools.is_empty() {
        out.push('\n');
        render_tool_descriptions_into(tools, &mut out);
    }

    if !project_docs.is_empty() {
        out.push('\n');
        out.push_str(PROJECT_HEADING);
        out.push_str(
            "\n\nInstruction files from this project. Follow them. Where two disagree, the \
             one listed later (deeper in the tree) wins.\n\n",
        );
        out.push_str(project_docs.text.trim_end());
        out.push('\n');
    }

    if let Some(text) = user_override.map(str::trim).filter(|t| !t.is_empty()) {
        out.push('\n');
        out.push_str(OVERRIDE_HEADING);
        out.push_str(
            "\n\nThese instructions come from the user of this session and take precedence \
             over everything above.\n\n",
        );
        out.push_str(text);
        out.push('\n');
    }
    out
}

/// The tool descriptions layer: a `# Tools` heading, then one line per tool,
/// `- name: summary`, where the summary is the first paragraph of its description with
/// line breaks folded into spaces. Freeform tools are marked as taking plain text.
fn render_tool_descriptions_into(tools: &[ToolDefinition], out: &mut String) {
    out.push_str(TOOLS_HEADING);
    out.push_str(
        "\n\nThe tools of this session (their parameter schemas come with each request):\n",
    );
    for tool in tools {
        out.push_str("- ");
        out.push_str(&tool.name);
        if tool.freeform.is_some() {
            out.push_str(" (takes plain text, not JSON)");
        }
        let summary = first_paragraph(&tool.description);
        if !summary.is_empty() {
            out.push_str(": ");
            push_folded(out, summary);
        }
        out.push('\n');
    }
}

/// The text before the first blank line, trimmed.
fn first_paragraph(text: &str) -> &str {
    let text = text.trim();
    let mut end = text.len();
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        if line.trim().is_empty() {
            end = offset;
            break;
        }
        offset += line.len();
    }
    text[..end].trim_end()
}

/// Appends `text` with every run of whitespace folded into one space.
fn push_folded(out: &mut String, text: &str) {
    let mut first = true;
    for word in text.split_whitespace() {
        if !first {
            out.push(' ');
        }
        out.push_str(word);
        first = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::path::PathBuf;

    fn tool(name: &str, description: &str) -> ToolDefinition {
        ToolDefinition {
            name: name.into(),
            description: description.into(),
            parameters: json!({"type": "object"}).into(),
            freeform: None,
        }
    }

    fn context() -> EnvironmentContext {
        EnvironmentContext {
            working_directory: PathBuf::from("/w"),
            is_git_repository: false,
            git_branch: None,
            platform: "linux".into(),
            os_version: "Linux 6".into(),
            today: "2026-01-02".into(),
            model_id: "m".into(),
            model_display_name: "m".into(),
            knowledge_cutoff: "unknown".into(),
            git: None,
        }
    }

    /// The tool descriptions layer on its own.
    fn render_tool_descriptions(tools: &[ToolDefinition]) -> String {
        let mut out = String::new();
        render_tool_descriptions_into(tools, &mut out);
        out
    }

    #[test]
    fn tool_lines_keep_the_given_order_and_the_first_paragraph() {
        let tools = [
            tool(
                "shell",
                "Run a command.\nOutput is captured.\n\nDetails nobody needs.",
            ),
            tool("alpha", "  Read things.  "),
            tool("silent", ""),
        ];
        assert_eq!(
            render_tool_descriptions(&tools),
            "# Tools\n\nThe tools of this session (their parameter schemas come with each \
             request):\n- shell: Run a command. Output is captured.\n- alpha: Read things.\n\
             - silent\n"
        );
    }

    #[test]
    fn freeform_tools_are_marked_as_plain_text() {
        let mut patch = tool("apply_patch", "Apply a patch.");
        patch.freeform = Some(crate::llm::FreeformFormat {
            syntax: "lark".into(),
            definition: "start: x".into(),
        });
        let text = render_tool_descriptions(&[patch]);
        assert!(text.contains("- apply_patch (takes plain text, not JSON): Apply a patch.\n"));
    }

    #[test]
    fn empty_layers_are_left_out() {
        let prompt = build_system_prompt("Base.", &context(), &[], &ProjectDocs::default(), None);
        assert!(prompt.starts_with("Base.\n\n<environment>\n"));
        assert!(prompt.ends_with("</environment>\n"));
        assert!(!prompt.contains(TOOLS_HEADING));
        assert!(!prompt.contains(PROJECT_HEADING));
        assert!(!prompt.contains(OVERRIDE_HEADING));
        let blank = build_system_prompt("", &context(), &[], &ProjectDocs::default(), Some(" \n"));
        assert!(blank.starts_with("<environment>"));
        assert!(!blank.contains(OVERRIDE_HEADING));
    }

    #[test]
    fn layers_are_separated_by_exactly_one_blank_line() {
        let docs = ProjectDocs {
            files: vec![PathBuf::from("/w/AGENTS.md")],
            text: "## /w/AGENTS.md\n\nUse tabs.".into(),
            truncated: false,
            skipped: Vec::new(),
        };
        let prompt = build_system_prompt(
            "Base.\n\n",
            &context(),
            &[tool("shell", "Run.")],
            &docs,
            Some("Be brief."),
        );
        assert!(!prompt.contains("\n\n\n"), "{prompt}");
        for heading in [TOOLS_HEADING, PROJECT_HEADING, OVERRIDE_HEADING] {
            assert!(prompt.contains(&format!("\n\n{heading}\n\n")), "{heading}");
        }
        assert!(prompt.ends_with("Be brief.\n"));
    }

    #[test]
    fn every_profile_has_base_instructions_and_others_have_none() {
        for id in ["openai", "anthropic", "gemini"] {
            assert!(
                base_instructions(id).is_some_and(|text| !text.is_empty()),
                "{id}"
            );
        }
        assert_eq!(base_instructions("other"), None);
    }

    #[test]
    fn each_base_prompt_covers_the_topics_of_its_profile() {
        let shared = [
            "coding agent",
            "glob",
            "grep",
            "read_file",
            "shell",
            "non-interactive",
            "timeout_ms",
            "Never claim",
            "blocked",
            "spawn_agent",
            "summary",
        ];
        let own: [(&str, &[&str]); 3] = [
            (
                "openai",
                &[
                    "apply_patch",
                    "*** Begin Patch",
                    "*** End Patch",
                    "*** Add File: ",
                    "*** Update File: ",
                    "*** Delete File: ",
                    "*** Move to: ",
                    "@@",
                    "3 lines",
                    "relative to the working directory",
                    "several files",
                ],
            ),
            (
                "anthropic",
                &[
                    "edit_file",
                    "old_string",
                    "unique",
                    "replace_all",
                    "indentation",
                    "Read before you edit",
                    "Prefer editing to rewriting",
                ],
            ),
            (
                "gemini",
                &[
                    "GEMINI.md",
                    "AGENTS.md",
                    "deeper in the tree",
                    "read_many_files",
                    "list_dir",
                ],
            ),
        ];
        for (id, topics) in own {
            let text = base_instructions(id).unwrap();
            for topic in shared.iter().chain(topics.iter()) {
                assert!(text.contains(topic), "{id} prompt lacks {topic:?}");
            }
        }
        assert!(
            !base_instructions("anthropic")
                .unwrap()
                .contains("apply_patch")
        );
        assert!(!base_instructions("openai").unwrap().contains("edit_file"));
    }

    #[test]
    fn base_instructions_are_80_to_200_lines_each() {
        for id in ["openai", "anthropic", "gemini"] {
            let lines = base_instructions(id).unwrap().lines().count();
            assert!((80..=200).contains(&lines), "{id}: {lines} lines");
        }
    }
}
