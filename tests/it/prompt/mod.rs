//! System prompt layers, environment context, git snapshot and project docs discovery,
//! against real files in temporary directories and real git repositories.

pub mod git_hostile;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use agentloop::exec::LocalExecutionEnvironment;
use agentloop::llm::ToolDefinition;
use agentloop::unstable::{
    EnvironmentContext, PROJECT_DOCS_BUDGET, PROJECT_DOCS_TRUNCATION_MARKER, ProjectDocs,
    base_instructions, build_system_prompt, discover_project_docs,
};
use serde_json::json;

/// 2026-03-04T12:00:00Z.
fn fixed_now() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_772_625_600)
}

/// Runs git in `dir` with a private, empty configuration (only the child's environment is
/// set; the test binary's stays untouched); returns its output, trimmed.
fn git(dir: &Path, args: &[&str]) -> String {
    let output = Command::new("git")
        .args([
            "-c",
            "user.name=Test",
            "-c",
            "user.email=test@example.com",
            "-c",
            "commit.gpgsign=false",
        ])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .expect("git runs");
    assert!(
        output.status.success(),
        "git {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_string()
}

fn write(path: &Path, text: &str) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, text).unwrap();
}

/// A repository at `<temp>/outer/repo` (branch `topic-branch`) with every kind of
/// instruction file at the root and in `sub/`, a sibling `other/` and an `outer/` level
/// above the repository that must never be read; the working directory is `sub/leaf`.
struct DocsTree {
    _temp: tempfile::TempDir,
    root: PathBuf,
    working_dir: PathBuf,
}

fn docs_tree() -> DocsTree {
    let temp = tempfile::tempdir().unwrap();
    let outer = temp.path().join("outer");
    let root = outer.join("repo");
    fs::create_dir_all(&root).unwrap();
    git(&root, &["init", "-q", "-b", "topic-branch"]);
    write(&outer.join("AGENTS.md"), "OUTSIDE-THE-REPO");
    for (dir, tag) in [(root.clone(), "ROOT"), (root.join("sub"), "SUB")] {
        write(&dir.join("AGENTS.md"), &format!("{tag}-AGENTS"));
        write(&dir.join("CLAUDE.md"), &format!("{tag}-CLAUDE"));
        write(&dir.join("GEMINI.md"), &format!("{tag}-GEMINI"));
        write(&dir.join(".codex/instructions.md"), &format!("{tag}-CODEX"));
    }
    write(&root.join("other/AGENTS.md"), "SIBLING-AGENTS");
    let working_dir = root.join("sub/leaf");
    fs::create_dir_all(&working_dir).unwrap();
    DocsTree {
        _temp: temp,
        root,
        working_dir,
    }
}

#[test]
fn each_profile_loads_agents_md_and_its_own_file_root_first() {
    let tree = docs_tree();
    let env = LocalExecutionEnvironment::new(&tree.working_dir).unwrap();
    let cases = [
        ("anthropic", "CLAUDE.md", "CLAUDE"),
        ("gemini", "GEMINI.md", "GEMINI"),
        ("openai", ".codex/instructions.md", "CODEX"),
    ];
    let all_tags = ["CLAUDE", "GEMINI", "CODEX"];
    for (profile, own_file, own_tag) in cases {
        let docs = discover_project_docs(&env, profile);
        let expected: Vec<PathBuf> = vec![
            tree.root.join("AGENTS.md"),
            tree.root.join(own_file),
            tree.root.join("sub/AGENTS.md"),
            tree.root.join("sub").join(own_file),
        ];
        assert_eq!(docs.files, expected, "{profile}");
        assert!(!docs.truncated, "{profile}");

        // The text holds the same files in the same order, each under its path.
        let markers = [
            "ROOT-AGENTS".to_string(),
            format!("ROOT-{own_tag}"),
            "SUB-AGENTS".to_string(),
            format!("SUB-{own_tag}"),
        ];
        let positions: Vec<usize> = markers
            .iter()
            .map(|m| {
                docs.text
                    .find(m.as_str())
                    .unwrap_or_else(|| panic!("{profile}: {m}"))
            })
            .collect();
        assert!(
            positions.windows(2).all(|w| w[0] < w[1]),
            "{profile}: {positions:?}"
        );
        for path in &expected {
            let heading = format!("## {}\n", path.display());
            assert!(docs.text.contains(&heading), "{profile}: {heading}");
        }

        // Never another profile's file, a sibling's, or one above the repository.
        for tag in all_tags.iter().filter(|t| **t != own_tag) {
            assert!(!docs.text.contains(tag), "{profile} loaded a {tag} file");
        }
        assert!(!docs.text.contains("SIBLING"), "{profile}");
        assert!(!docs.text.contains("OUTSIDE-THE-REPO"), "{profile}");
    }
}

#[test]
fn an_unknown_profile_loads_only_agents_md() {
    let tree = docs_tree();
    let env = LocalExecutionEnvironment::new(&tree.working_dir).unwrap();
    let docs = discover_project_docs(&env, "custom");
    assert_eq!(
        docs.files,
        [tree.root.join("AGENTS.md"), tree.root.join("sub/AGENTS.md")]
    );
}

#[test]
fn outside_a_repository_only_the_working_directory_is_searched() {
    let temp = tempfile::tempdir().unwrap();
    let working_dir = temp.path().join("project");
    write(&temp.path().join("AGENTS.md"), "PARENT");
    write(&working_dir.join("AGENTS.md"), "HERE");
    write(&working_dir.join("CLAUDE.md"), "HERE-CLAUDE");
    let env = LocalExecutionEnvironment::new(&working_dir).unwrap();
    let docs = discover_project_docs(&env, "anthropic");
    assert_eq!(
        docs.files,
        [working_dir.join("AGENTS.md"), working_dir.join("CLAUDE.md")]
    );
    assert!(!docs.text.contains("PARENT"));
}

#[test]
fn a_tree_without_instruction_files_gives_empty_docs() {
    let temp = tempfile::tempdir().unwrap();
    let env = LocalExecutionEnvironment::new(temp.path()).unwrap();
    let docs = discover_project_docs(&env, "openai");
    assert_eq!(docs, ProjectDocs::default());
    assert!(docs.is_empty());
}

#[test]
fn an_unreadable_instruction_file_is_skipped_and_reported() {
    let temp = tempfile::tempdir().unwrap();
    fs::write(temp.path().join("AGENTS.md"), b"\x00\x01binary\x00").unwrap();
    write(&temp.path().join("CLAUDE.md"), "readable");
    let env = LocalExecutionEnvironment::new(temp.path()).unwrap();
    let docs = discover_project_docs(&env, "anthropic");
    assert_eq!(docs.files, [temp.path().join("CLAUDE.md")]);
    assert_eq!(docs.skipped.len(), 1);
    assert_eq!(docs.skipped[0].0, temp.path().join("AGENTS.md"));
    assert!(docs.text.contains("readable"));
}

#[test]
fn forty_kilobytes_of_docs_are_cut_at_32_kilobytes_with_the_marker() {
    let temp = tempfile::tempdir().unwrap();
    let root = temp.path().join("repo");
    fs::create_dir_all(&root).unwrap();
    git(&root, &["init", "-q"]);
    // 24 KB of two-byte characters at the root and 16 KB deeper: 40 KB in all, so the
    // cut falls inside the second file and may land between the bytes of a character.
    let root_text = "é".repeat(12 * 1024);
    let sub_text = "ü".repeat(8 * 1024);
    write(&root.join("AGENTS.md"), &root_text);
    write(&root.join("sub/AGENTS.md"), &sub_text);
    write(&root.join("sub/deeper/AGENTS.md"), "NEVER-REACHED");
    let env = LocalExecutionEnvironment::new(root.join("sub/deeper")).unwrap();

    let docs = discover_project_docs(&env, "anthropic");

    assert!(docs.truncated);
    let (kept, marker) = docs.text.rsplit_once('\n').expect("a marker line");
    assert_eq!(marker, PROJECT_DOCS_TRUNCATION_MARKER);
    assert_eq!(marker, "[Project instructions truncated at 32KB]");
    assert!(
        kept.len() <= PROJECT_DOCS_BUDGET,
        "{} bytes kept",
        kept.len()
    );
    assert!(
        kept.len() >= PROJECT_DOCS_BUDGET - 1,
        "{} bytes kept",
        kept.len()
    );
    let untruncated = format!(
        "## {}\n\n{root_text}\n\n## {}\n\n{sub_text}",
        root.join("AGENTS.md").display(),
        root.join("sub/AGENTS.md").display()
    );
    assert!(untruncated.starts_with(kept), "the kept text is a prefix");
    assert!(!docs.text.contains("NEVER-REACHED"));
    assert_eq!(
        docs.files,
        [root.join("AGENTS.md"), root.join("sub/AGENTS.md")]
    );
}

fn tools() -> Vec<ToolDefinition> {
    [
        ("read_file", "Read a file with line numbers."),
        ("shell", "Run a shell command.\n\nLong details."),
    ]
    .into_iter()
    .map(|(name, description)| ToolDefinition {
        name: name.into(),
        description: description.into(),
        parameters: json!({"type": "object", "properties": {}}).into(),
        freeform: None,
    })
    .collect()
}

#[test]
fn the_system_prompt_holds_the_five_layers_in_order_with_the_override_last() {
    let tree = docs_tree();
    let env = LocalExecutionEnvironment::new(&tree.working_dir).unwrap();
    let context = EnvironmentContext::capture_at(&env, "claude-opus-4-6", fixed_now());
    let docs = discover_project_docs(&env, "anthropic");
    let base = base_instructions("anthropic").unwrap();
    let override_text = "Always answer in French.";

    let prompt = build_system_prompt(base, &context, &tools(), &docs, Some(override_text));

    let first_base_line = base.lines().next().unwrap();
    let layer_starts = [
        prompt.find(first_base_line).expect("base instructions"),
        prompt.find("<environment>\n").expect("environment block"),
        prompt.find("# Tools\n").expect("tool descriptions"),
        prompt
            .find("# Project instructions\n")
            .expect("project docs"),
        prompt.find(override_text).expect("override"),
    ];
    assert_eq!(layer_starts[0], 0, "the base comes first");
    assert!(
        layer_starts.windows(2).all(|w| w[0] < w[1]),
        "layers out of order: {layer_starts:?}"
    );
    assert!(
        prompt.ends_with(&format!("{override_text}\n")),
        "override last"
    );

    let environment = &prompt[layer_starts[1]..layer_starts[2]];
    assert!(
        environment.contains("Today's date: 2026-03-04\n"),
        "{environment}"
    );
    assert!(
        environment.contains("Git branch: topic-branch\n"),
        "{environment}"
    );
    assert!(
        environment.contains("Is git repository: true\n"),
        "{environment}"
    );
    assert!(
        environment.contains(&format!(
            "Working directory: {}\n",
            tree.working_dir.display()
        )),
        "{environment}"
    );
    assert!(environment.contains("Model: Claude Opus 4.6 (claude-opus-4-6)\n"));
    assert!(environment.contains("Knowledge cutoff: May 2025\n"));

    let tool_layer = &prompt[layer_starts[2]..layer_starts[3]];
    let read = tool_layer.find("- read_file: Read a file with line numbers.\n");
    let shell = tool_layer.find("- shell: Run a shell command.\n");
    assert!(
        read.is_some() && shell.is_some() && read < shell,
        "{tool_layer}"
    );
    assert!(!tool_layer.contains("Long details"));

    assert!(prompt[layer_starts[3]..].contains("SUB-CLAUDE"));
}

#[test]
fn the_environment_block_uses_the_spec_field_names_in_order() {
    let temp = tempfile::tempdir().unwrap();
    let env = LocalExecutionEnvironment::new(temp.path()).unwrap();
    let context = EnvironmentContext::capture_at(&env, "gpt-5.2-codex", fixed_now());
    let block = context.render();
    let names: Vec<&str> = block
        .lines()
        .filter_map(|line| line.split_once(": ").map(|(name, _)| name))
        .collect();
    assert_eq!(
        names,
        [
            "Working directory",
            "Is git repository",
            "Git branch",
            "Platform",
            "OS version",
            "Today's date",
            "Model",
            "Knowledge cutoff"
        ]
    );
    assert!(block.starts_with("<environment>\n"));
    assert!(
        block.ends_with("\n</environment>"),
        "no git block outside a repository"
    );
    assert!(block.contains("Is git repository: false\nGit branch: none\n"));
    assert!(block.contains(&format!("Platform: {}\n", platform_name())));
}

fn platform_name() -> &'static str {
    match std::env::consts::OS {
        "macos" => "darwin",
        other => other,
    }
}

#[test]
fn two_builds_from_the_same_inputs_are_byte_identical() {
    let tree = docs_tree();
    let env = LocalExecutionEnvironment::new(&tree.working_dir).unwrap();
    let build = || {
        let context = EnvironmentContext::capture_at(&env, "gemini-3-pro-preview", fixed_now());
        let docs = discover_project_docs(&env, "gemini");
        build_system_prompt(
            base_instructions("gemini").unwrap(),
            &context,
            &tools(),
            &docs,
            Some("Keep answers short."),
        )
    };
    let first = build();
    let second = build();
    assert_eq!(first.as_bytes(), second.as_bytes());
    assert!(
        first.contains("ROOT-GEMINI"),
        "the docs are part of what is compared"
    );
}

/// An environment whose commands cannot find `git` (its PATH has no git), so the branch
/// must come from the `.git` files alone.
fn env_without_git(working_dir: &Path) -> LocalExecutionEnvironment {
    let base_env = [("PATH".to_string(), "/nonexistent-bin".to_string())]
        .into_iter()
        .collect();
    LocalExecutionEnvironment::new(working_dir)
        .unwrap()
        .with_base_env(base_env)
}

#[test]
fn without_a_git_binary_the_branch_is_read_from_the_head_file() {
    let temp = tempfile::tempdir().unwrap();
    git(temp.path(), &["init", "-q", "-b", "from-head-file"]);
    fs::create_dir_all(temp.path().join("nested")).unwrap();
    let env = env_without_git(&temp.path().join("nested"));

    let context = EnvironmentContext::capture_at(&env, "m", fixed_now());

    assert!(context.is_git_repository);
    assert_eq!(context.git_branch.as_deref(), Some("from-head-file"));
    assert_eq!(context.git, None, "no snapshot without git");
    assert!(context.render().contains("Git branch: from-head-file\n"));
}

#[test]
fn a_linked_worktree_branch_is_found_through_its_gitdir_file() {
    let temp = tempfile::tempdir().unwrap();
    let main = temp.path().join("main");
    fs::create_dir_all(&main).unwrap();
    git(&main, &["init", "-q", "-b", "trunk"]);
    write(&main.join("a.txt"), "a");
    git(&main, &["add", "a.txt"]);
    git(&main, &["commit", "-q", "-m", "first"]);
    git(
        &main,
        &["worktree", "add", "-q", "-b", "side-branch", "../linked"],
    );
    let linked = temp.path().join("linked");
    assert!(
        linked.join(".git").is_file(),
        "a linked worktree has a .git file"
    );

    let context = EnvironmentContext::capture_at(&env_without_git(&linked), "m", fixed_now());

    assert!(context.is_git_repository);
    assert_eq!(context.git_branch.as_deref(), Some("side-branch"));
}

#[test]
fn the_git_snapshot_reports_branch_status_counts_and_recent_subjects() {
    let temp = tempfile::tempdir().unwrap();
    let root = temp.path();
    git(root, &["init", "-q", "-b", "snapshot-branch"]);
    for i in 0..12 {
        write(&root.join("tracked.txt"), &format!("{i}\n"));
        git(root, &["add", "tracked.txt"]);
        git(root, &["commit", "-q", "-m", &format!("change number {i}")]);
    }
    write(&root.join("tracked.txt"), "modified\n");
    write(&root.join("staged.txt"), "staged\n");
    git(root, &["add", "staged.txt"]);
    write(&root.join("untracked-1.txt"), "u\n");
    write(&root.join("untracked-2.txt"), "u\n");
    let env = LocalExecutionEnvironment::new(root).unwrap();

    let context = EnvironmentContext::capture_at(&env, "gpt-5", fixed_now());

    let snapshot = context.git.as_ref().expect("git ran and answered");
    assert_eq!(snapshot.branch.as_deref(), Some("snapshot-branch"));
    assert_eq!(context.git_branch.as_deref(), Some("snapshot-branch"));
    let expected: Vec<String> = (2..12)
        .rev()
        .map(|i| format!("change number {i}"))
        .collect();
    assert_eq!(
        snapshot.recent_commits, expected,
        "the last 10, newest first"
    );
    let counts = snapshot.status.expect("status finished");
    assert_eq!(
        (
            counts.staged,
            counts.modified,
            counts.untracked,
            counts.conflicted
        ),
        (1, 1, 2, 0)
    );

    let text = context.render();
    let environment_end = text.find("</environment>").unwrap();
    let git_start = text.find("<git>\n").expect("a git block");
    assert!(
        environment_end < git_start,
        "the git block follows the environment"
    );
    assert!(
        text.contains("Status: 1 staged, 1 modified, 2 untracked\n"),
        "{text}"
    );
    assert!(
        text.contains("- change number 11\n- change number 10\n"),
        "{text}"
    );
    assert!(!text.contains("change number 1\n"), "{text}");
}

#[test]
fn a_detached_head_is_named_with_its_short_commit() {
    let temp = tempfile::tempdir().unwrap();
    let root = temp.path();
    git(root, &["init", "-q", "-b", "trunk"]);
    write(&root.join("a.txt"), "a");
    git(root, &["add", "a.txt"]);
    git(root, &["commit", "-q", "-m", "only commit"]);
    git(root, &["checkout", "-q", "--detach", "HEAD"]);
    let env = LocalExecutionEnvironment::new(root).unwrap();

    let context = EnvironmentContext::capture_at(&env, "m", fixed_now());

    let branch = context.git_branch.expect("a branch description");
    assert!(branch.starts_with("HEAD detached at "), "{branch}");
    assert!(context.git.is_some());
}

#[test]
fn a_stray_dot_git_that_git_rejects_is_not_a_repository() {
    let temp = tempfile::tempdir().unwrap();
    fs::create_dir_all(temp.path().join(".git")).unwrap();
    let env = LocalExecutionEnvironment::new(temp.path()).unwrap();

    let context = EnvironmentContext::capture_at(&env, "m", fixed_now());

    assert!(!context.is_git_repository);
    assert_eq!(context.git, None);
    assert!(
        context
            .render()
            .contains("Is git repository: false\nGit branch: none\n")
    );
}
