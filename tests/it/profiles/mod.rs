//! The provider profiles through real sessions: the tool definitions each model sees
//! (checked in under tests/data/profiles), the layered system prompt in the recorded
//! request body, project documents per profile, provider options on the wire, the
//! Anthropic shell default, custom tools on top of a profile, and profiles over wire
//! formats other than their own.

pub mod parity;

use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use agentloop::CancelToken;
use agentloop::exec::{
    CommandRequest, ExecResult, ExecutionEnvironment, LocalExecutionEnvironment, OutputCallback,
};
use agentloop::llm::ToolDefinition;
use agentloop::llm::gemini::Gemini;
use agentloop::llm::openai_chat::OpenAiChat;
use agentloop::profiles::{self, ProviderProfile};
use agentloop::session::{Session, SessionConfig};
use agentloop::tools::{RegisteredTool, ToolContext, ToolInput, ToolOutput};
use agentloop::unstable::format_date;
use serde_json::{Value, json};

use support::parity_kit::{Kit, Run, ended};
use support::session::collect_input;
use support::turns::{chat_turn, function, gemini_turn};
use support::{self, Server, http_options};

const KITS: [Kit; 3] = [Kit::OpenAi, Kit::Anthropic, Kit::Gemini];

fn kit_name(kit: Kit) -> &'static str {
    match kit {
        Kit::OpenAi => "openai",
        Kit::Anthropic => "anthropic",
        Kit::Gemini => "gemini",
    }
}

fn data_dir() -> PathBuf {
    support::data_dir().join("profiles")
}

/// Compares `actual` with the checked-in file; writes it only when the test's environment
/// has `UPDATE_EXPECT=1`, so a change is always a reviewed diff.
fn check_expect(path: &Path, actual: &str) {
    let update = std::env::var("UPDATE_EXPECT").is_ok_and(|v| v == "1");
    let expected = std::fs::read_to_string(path).ok();
    if expected.as_deref() == Some(actual) {
        return;
    }
    if update {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, actual).unwrap();
        return;
    }
    match expected {
        None => panic!(
            "{} is missing; run with UPDATE_EXPECT=1 to write it, then review it",
            path.display()
        ),
        Some(expected) => {
            let first = expected
                .lines()
                .zip(actual.lines())
                .position(|(a, b)| a != b)
                .unwrap_or(expected.lines().count().min(actual.lines().count()));
            panic!(
                "{} differs from the profile's tools (first at line {}); if the change is \
                 intended, run with UPDATE_EXPECT=1 and review the diff\nexpected: {:?}\nactual:   {:?}",
                path.display(),
                first + 1,
                expected.lines().nth(first),
                actual.lines().nth(first)
            )
        }
    }
}

/// Compact JSON laid out as `serde_json::to_string_pretty` lays it out, keeping the order
/// of its keys (a `Value` would sort them).
fn indent(compact: &str) -> String {
    let mut out = String::new();
    let mut depth = 0;
    let (mut in_string, mut escaped) = (false, false);
    let mut chars = compact.chars().peekable();
    let newline = |out: &mut String, depth: usize| {
        out.push('\n');
        out.push_str(&"  ".repeat(depth));
    };
    while let Some(c) = chars.next() {
        if in_string {
            out.push(c);
            in_string = escaped || c != '"';
            escaped = !escaped && c == '\\';
            continue;
        }
        match c {
            '"' => {
                in_string = true;
                out.push(c);
            }
            '{' | '[' if matches!(chars.peek(), Some('}' | ']')) => {
                out.push(c);
                out.push(chars.next().unwrap());
            }
            '{' | '[' => {
                out.push(c);
                depth += 1;
                newline(&mut out, depth);
            }
            '}' | ']' => {
                depth -= 1;
                newline(&mut out, depth);
                out.push(c);
            }
            ',' => {
                out.push(c);
                newline(&mut out, depth);
            }
            ':' => out.push_str(": "),
            c => out.push(c),
        }
    }
    out
}

#[test]
fn the_layout_of_the_checked_in_tool_files_is_serde_jsons_pretty_one() {
    let value = json!({"a": [1, {"b": "x:\\\"{}[],"}, [], {}], "c": {"d": null}});
    assert_eq!(
        indent(&value.to_string()),
        serde_json::to_string_pretty(&value).unwrap()
    );
}

#[test]
fn each_profiles_tool_definitions_match_the_checked_in_file() {
    for kit in KITS {
        let tools = kit.profile().tools();
        // Compact, schemas as the model gets them (in their own key order), then indented.
        let mut text = indent(&serde_json::to_string(&tools).unwrap());
        text.push('\n');
        check_expect(
            &data_dir().join(format!("{}.tools.json", kit_name(kit))),
            &text,
        );
    }
}

#[test]
fn each_profile_offers_its_providers_tool_set() {
    let names = |kit: Kit| kit.profile().tool_registry.names();
    let subagent = ["spawn_agent", "send_input", "wait", "close_agent"];
    let expect = |kit: Kit, own: &[&str]| {
        let all: Vec<&str> = own.iter().chain(subagent.iter()).copied().collect();
        assert_eq!(names(kit), all, "{kit:?}");
    };
    expect(
        Kit::OpenAi,
        &[
            "read_file",
            "apply_patch",
            "write_file",
            "shell",
            "write_stdin",
            "list_background_processes",
            "kill_background_process",
            "grep",
            "glob",
            "update_plan",
        ],
    );
    expect(
        Kit::Anthropic,
        &[
            "read_file",
            "write_file",
            "edit_file",
            "shell",
            "list_background_processes",
            "read_background_output",
            "write_background_input",
            "kill_background_process",
            "grep",
            "glob",
            "todo_write",
        ],
    );
    expect(
        Kit::Gemini,
        &[
            "read_file",
            "read_many_files",
            "write_file",
            "edit_file",
            "shell",
            "list_background_processes",
            "read_background_output",
            "write_background_input",
            "kill_background_process",
            "grep",
            "glob",
            "list_dir",
            "write_todos",
        ],
    );
    for kit in KITS {
        let profile = kit.profile();
        assert_eq!(profile.id, kit_name(kit));
        assert!(profile.supports_parallel_tool_calls && profile.supports_streaming);
        assert!(profile.supports_reasoning, "{kit:?}");
    }
    assert_eq!(Kit::OpenAi.profile().context_window_size, 400_000);
    assert_eq!(Kit::Anthropic.profile().context_window_size, 200_000);
    assert_eq!(Kit::Gemini.profile().context_window_size, 1_048_576);
}

fn git(dir: &Path, args: &[&str]) {
    let status = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
        .args(["-c", "commit.gpgsign=false"])
        .args(args)
        .current_dir(dir)
        // The child's environment only: the test binary's own stays untouched.
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .expect("git runs");
    assert!(status.success(), "git {args:?}");
}

/// A git repository on branch `feature/prompt-check` with every profile's instruction
/// file at the root and an `AGENTS.md` one level down, where the session works.
fn repository() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    git(root, &["init", "-q", "-b", "feature/prompt-check"]);
    std::fs::write(root.join("AGENTS.md"), "ROOT-AGENTS: run make test.\n").unwrap();
    std::fs::write(root.join("CLAUDE.md"), "CLAUDE-ONLY: prefer small edits.\n").unwrap();
    std::fs::write(root.join("GEMINI.md"), "GEMINI-ONLY: explain briefly.\n").unwrap();
    std::fs::create_dir_all(root.join(".codex")).unwrap();
    std::fs::write(
        root.join(".codex/instructions.md"),
        "CODEX-ONLY: patch carefully.\n",
    )
    .unwrap();
    std::fs::create_dir_all(root.join("service")).unwrap();
    std::fs::write(
        root.join("service/AGENTS.md"),
        "SERVICE-AGENTS: use tabs.\n",
    )
    .unwrap();
    git(root, &["add", "-A"]);
    git(root, &["commit", "-q", "-m", "initial layout"]);
    dir
}

#[test]
fn the_system_prompt_has_the_layers_in_order_with_date_branch_docs_and_the_override_last() {
    let own_doc = |kit: Kit| match kit {
        Kit::OpenAi => "CODEX-ONLY",
        Kit::Anthropic => "CLAUDE-ONLY",
        Kit::Gemini => "GEMINI-ONLY",
    };
    for kit in KITS {
        let repo = repository();
        let working = repo.path().join("service");
        let server = Server::start(vec![kit.text("ok"), kit.text("ok again")]);
        let before = format_date(SystemTime::now());
        let profile = kit
            .profile()
            .with_instructions("OVERRIDE-LAST: answer in French.");
        let env = Arc::new(LocalExecutionEnvironment::new(&working).unwrap());
        let session =
            Session::new(profile, env, kit.client(&server), SessionConfig::default()).unwrap();
        let mut events = session.events();
        session.submit("hello").unwrap();
        collect_input(&mut events);
        // Instruction files changed after the start do not change this session's prompt.
        std::fs::write(repo.path().join("AGENTS.md"), "CHANGED LATER\n").unwrap();
        session.submit("hello again").unwrap();
        collect_input(&mut events);
        let after = format_date(SystemTime::now());
        let bodies: Vec<Value> = server.requests().iter().map(|r| r.json().clone()).collect();
        let prompt = kit.system_prompt(&bodies[0]);
        assert_eq!(
            prompt,
            kit.system_prompt(&bodies[1]),
            "{kit:?}: captured once"
        );

        let base_first_line = agentloop::unstable::base_instructions(kit_name(kit))
            .unwrap()
            .lines()
            .next()
            .unwrap();
        let at = |needle: &str| {
            prompt
                .find(needle)
                .unwrap_or_else(|| panic!("{kit:?}: {needle:?} missing from\n{prompt}"))
        };
        let order = [
            at(base_first_line),
            at("<environment>"),
            at("# Tools\n\nThe tools of this session"),
            at("# Project instructions\n\nInstruction files from this project"),
            at("ROOT-AGENTS"),
            at("SERVICE-AGENTS"),
            at("OVERRIDE-LAST"),
        ];
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{kit:?}: {order:?}");
        assert!(prompt.starts_with(base_first_line));
        assert!(
            prompt
                .trim_end()
                .ends_with("OVERRIDE-LAST: answer in French.")
        );
        assert!(
            prompt.contains(&format!("Today's date: {before}"))
                || prompt.contains(&format!("Today's date: {after}")),
            "{prompt}"
        );
        assert!(
            prompt.contains("Git branch: feature/prompt-check"),
            "{prompt}"
        );
        assert!(prompt.contains("Is git repository: true"));
        assert!(prompt.contains(&format!("Working directory: {}", working.display())));
        let model_line = prompt.lines().find(|l| l.starts_with("Model: ")).unwrap();
        assert!(model_line.contains(kit.model()), "{model_line}");
        assert!(
            prompt.contains("initial layout"),
            "the git snapshot's recent commits"
        );
        // Only this profile's own instruction file, besides AGENTS.md.
        for other in KITS {
            assert_eq!(
                prompt.contains(own_doc(other)),
                other == kit,
                "{kit:?} prompt and {}",
                own_doc(other)
            );
        }
        // The tool layer lists the profile's tools.
        for name in kit.profile().tool_registry.names() {
            assert!(prompt.contains(&format!("- {name}")), "{kit:?}: {name}");
        }
    }
}

#[test]
fn a_host_tool_registered_on_a_profile_replaces_the_profiles_tool_of_that_name() {
    for kit in KITS {
        let mut profile = kit.profile();
        let position = profile
            .tool_registry
            .names()
            .iter()
            .position(|n| n == "shell");
        profile.tool_registry.register(RegisteredTool::new(
            ToolDefinition {
                name: "shell".into(),
                description: "The host's sandboxed shell.".into(),
                parameters: json!({"type": "object", "properties": {"command": {"type": "string"}},
                                   "required": ["command"]})
                .into(),
                freeform: None,
            },
            |input, _ctx| match input {
                ToolInput::Json(args) => Ok(ToolOutput::text(format!(
                    "sandboxed: {}",
                    args["command"].as_str().unwrap_or_default()
                ))),
                ToolInput::Freeform(_) => Err("json only".into()),
            },
        ));
        profile.tool_registry.register(RegisteredTool::new(
            ToolDefinition {
                name: "run_tests".into(),
                description: "Run the project's test suite".into(),
                parameters: json!({"type": "object", "properties": {"filter": {"type": "string"}}})
                    .into(),
                freeform: None,
            },
            |_input, _ctx| Ok(ToolOutput::text("12 passed")),
        ));
        assert_eq!(
            profile
                .tool_registry
                .names()
                .iter()
                .position(|n| n == "shell"),
            position,
            "the replacement keeps the place"
        );
        let server = Server::start(vec![
            kit.calls(&[
                function("call_1", "shell", json!({"command": "rm -rf /"})),
                function("call_2", "run_tests", json!({"filter": "unit"})),
            ]),
            kit.text("done"),
        ]);
        let dir = tempfile::tempdir().unwrap();
        let env = Arc::new(LocalExecutionEnvironment::new(dir.path()).unwrap());
        let session =
            Session::new(profile, env, kit.client(&server), SessionConfig::default()).unwrap();
        let mut events = session.events();
        session.submit("go").unwrap();
        let ends = ended(&collect_input(&mut events));
        let output = |tool: &str| {
            ends.iter()
                .find(|e| e.tool_name == tool)
                .map(|e| e.text.clone())
                .unwrap_or_else(|| panic!("{kit:?}: no {tool} call"))
        };
        assert_eq!(output("shell"), "sandboxed: rm -rf /", "{kit:?}");
        assert_eq!(output("run_tests"), "12 passed", "{kit:?}");
        let body = server.requests()[0].json().clone();
        let tools = kit.tool_names(&body);
        assert!(tools.contains(&"run_tests".to_string()));
        assert_eq!(tools.iter().filter(|n| *n == "shell").count(), 1);
        assert!(body.to_string().contains("The host's sandboxed shell."));
    }
}

#[test]
fn with_model_changes_the_model_in_the_request_and_the_capabilities() {
    let profile = profiles::openai("gpt-5.2-codex").with_model("gpt-4o");
    assert_eq!(profile.context_window_size, 128_000);
    assert!(!profile.supports_reasoning);
    let server = Server::start(vec![Kit::OpenAi.text("hi")]);
    let dir = tempfile::tempdir().unwrap();
    let env = Arc::new(LocalExecutionEnvironment::new(dir.path()).unwrap());
    let session = Session::new(
        profile,
        env,
        Kit::OpenAi.client(&server),
        SessionConfig::default(),
    )
    .unwrap();
    let mut events = session.events();
    session.submit("hello").unwrap();
    collect_input(&mut events);
    let body = server.requests()[0].json().clone();
    assert_eq!(body["model"], "gpt-4o");
    assert!(body.get("include").is_none() || body["include"] == json!([]));
}

#[test]
fn anthropic_requests_carry_the_beta_headers_of_the_profile() {
    let server = Server::start(vec![Kit::Anthropic.text("hi")]);
    let dir = tempfile::tempdir().unwrap();
    let env = Arc::new(LocalExecutionEnvironment::new(dir.path()).unwrap());
    let profile = profiles::anthropic("claude-opus-4-6").merge_provider_options(json!({
        "anthropic": {"beta_headers": [
            profiles::INTERLEAVED_THINKING_BETA,
            profiles::CONTEXT_1M_BETA
        ]}
    }));
    let session = Session::new(
        profile,
        env,
        support::anthropic_client(&server),
        SessionConfig::default(),
    )
    .unwrap();
    let mut events = session.events();
    session.submit("hello").unwrap();
    collect_input(&mut events);
    let request = &server.requests()[0];
    let betas = request
        .header("anthropic-beta")
        .expect("an anthropic-beta header");
    assert!(betas.contains("interleaved-thinking-2025-05-14"), "{betas}");
    assert!(betas.contains("context-1m-2025-08-07"), "{betas}");
    // Claude 3 models get no interleaved-thinking beta.
    let old = profiles::anthropic("claude-3-5-haiku-latest");
    assert!(old.provider_options().is_none());
}

#[test]
fn gemini_requests_carry_the_profiles_safety_settings() {
    let mut run = Run::start(Kit::Gemini, vec![Kit::Gemini.text("hi")]);
    run.input("hello");
    let body = &run.bodies()[0];
    let settings = body["safetySettings"].as_array().expect("safetySettings");
    assert_eq!(settings.len(), 4);
    assert!(settings.iter().all(|s| s["threshold"] == "BLOCK_ONLY_HIGH"));
    assert!(
        settings
            .iter()
            .any(|s| s["category"] == "HARM_CATEGORY_DANGEROUS_CONTENT")
    );
}

const ADD_PATCH: &str =
    "*** Begin Patch\n*** Add File: made.txt\n+made by a JSON patch\n*** End Patch\n";

#[test]
fn the_openai_profile_over_chat_completions_sends_apply_patch_as_a_json_function() {
    let server = Server::start(vec![
        chat_turn(
            "",
            &[function(
                "call_1",
                "apply_patch",
                json!({"patch": ADD_PATCH}),
            )],
        ),
        chat_turn("Created.", &[]),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let env = Arc::new(LocalExecutionEnvironment::new(dir.path()).unwrap());
    let client = support::client_for(
        OpenAiChat::compatible(format!("{}/v1", server.url())).with_http_options(http_options()),
    );
    let profile = profiles::openai("qwen2.5-coder")
        .with_provider_id("openai-chat")
        .without_freeform_tools();
    let session = Session::new(profile, env, client, SessionConfig::default()).unwrap();
    let mut events = session.events();
    session.submit("make a file").unwrap();
    let ends = ended(&collect_input(&mut events));
    assert!(!ends[0].is_error, "{}", ends[0].text);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("made.txt")).unwrap(),
        "made by a JSON patch\n"
    );
    let body = server.requests()[0].json().clone();
    let tool = body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "apply_patch")
        .expect("apply_patch offered");
    assert_eq!(tool["type"], "function");
    let parameters = &tool["function"]["parameters"];
    assert_eq!(parameters["properties"]["patch"]["type"], "string");
    assert_eq!(parameters["required"], json!(["patch"]));
    // The prompt's tool list no longer calls it plain text, and the family's files apply.
    let system = body["messages"][0]["content"].to_string();
    assert!(!system.contains("takes plain text"), "{system}");
    assert!(system.contains("*** Begin Patch"), "the OpenAI base prompt");
}

#[test]
fn the_openai_profile_over_the_gemini_format_sends_apply_patch_as_a_function_declaration() {
    // Without without_freeform_tools: the wire format alone decides.
    let server = Server::start(vec![
        gemini_turn(
            "",
            &[function(
                "call_1",
                "apply_patch",
                json!({"patch": ADD_PATCH}),
            )],
        ),
        gemini_turn("Created.", &[]),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let env = Arc::new(LocalExecutionEnvironment::new(dir.path()).unwrap());
    let client = support::client_for(
        Gemini::new("AIzaFAKEKEY0123456789abcdefghijklmnopq")
            .with_base_url(server.url())
            .with_http_options(http_options()),
    );
    let profile = profiles::openai("gemini-2.5-pro").with_provider_id("gemini");
    let session = Session::new(profile, env, client, SessionConfig::default()).unwrap();
    let mut events = session.events();
    session.submit("make a file").unwrap();
    let ends = ended(&collect_input(&mut events));
    assert!(!ends[0].is_error, "{}", ends[0].text);
    assert!(dir.path().join("made.txt").exists());
    let body = server.requests()[0].json().clone();
    let declaration = body["tools"][0]["functionDeclarations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == "apply_patch")
        .expect("apply_patch declared")
        .clone();
    assert_eq!(
        declaration["parameters"]["properties"]["patch"]["type"],
        "string"
    );
}

#[test]
fn with_subagent_depth_zero_the_session_offers_no_subagent_tools() {
    let server = Server::start(vec![Kit::Anthropic.text("hi")]);
    let mut config = SessionConfig::default();
    config.max_subagent_depth = 0;
    let mut run = Run::with(Kit::Anthropic, server, config, |_| {});
    run.input("hello");
    let names = Kit::Anthropic.tool_names(&run.bodies()[0]);
    assert!(names.contains(&"edit_file".to_string()));
    for tool in ["spawn_agent", "send_input", "wait", "close_agent"] {
        assert!(!names.contains(&tool.to_string()), "{tool}");
    }
}

/// A local environment that records the timeout of every command it runs.
struct TimeoutRecorder {
    inner: LocalExecutionEnvironment,
    timeouts: Mutex<Vec<Duration>>,
}

impl ExecutionEnvironment for TimeoutRecorder {
    fn exec_command(
        &self,
        request: &CommandRequest,
        on_output: OutputCallback<'_>,
        cancel: &CancelToken,
    ) -> io::Result<ExecResult> {
        self.timeouts.lock().unwrap().push(request.timeout);
        self.inner.exec_command(request, on_output, cancel)
    }

    agentloop::forward_execution_environment!(self.inner =>
        read_file, read_bytes, write_file, remove_file, file_exists, stat, list_directory,
        grep, glob, working_directory, platform, os_version);
}

/// The timeouts of the commands a session of `kit` ran for one scripted `shell` call.
fn shell_timeouts(kit: Kit, args: Value, config: SessionConfig) -> Vec<Duration> {
    let server = Server::start(vec![
        kit.calls(&[function("call_1", "shell", args)]),
        kit.text("ok"),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let env = Arc::new(TimeoutRecorder {
        inner: LocalExecutionEnvironment::new(dir.path()).unwrap(),
        timeouts: Mutex::new(Vec::new()),
    });
    let session = Session::new(kit.profile(), env.clone(), kit.client(&server), config).unwrap();
    let mut events = session.events();
    session.submit("run it").unwrap();
    collect_input(&mut events);
    drop(events);
    drop(session);
    env.timeouts.lock().unwrap().clone()
}

#[test]
fn the_anthropic_shell_defaults_to_120_s_unless_the_call_or_the_session_says_otherwise() {
    let echo = json!({"command": "echo hi"});
    let default = SessionConfig::default;
    assert_eq!(
        shell_timeouts(Kit::Anthropic, echo.clone(), default()),
        [Duration::from_secs(120)]
    );
    assert_eq!(
        shell_timeouts(Kit::OpenAi, echo.clone(), default()),
        [Duration::from_secs(10)]
    );
    assert_eq!(
        shell_timeouts(Kit::Gemini, echo.clone(), default()),
        [Duration::from_secs(10)]
    );
    // The call's own timeout wins.
    assert_eq!(
        shell_timeouts(
            Kit::Anthropic,
            json!({"command": "echo hi", "timeout_ms": 3000}),
            default()
        ),
        [Duration::from_secs(3)]
    );
    // The session maximum still applies.
    assert_eq!(
        shell_timeouts(
            Kit::Anthropic,
            echo.clone(),
            default().with_max_command_timeout(Duration::from_secs(60))
        ),
        [Duration::from_secs(60)]
    );
    // A default the host configured explicitly applies to every profile.
    assert_eq!(
        shell_timeouts(
            Kit::Anthropic,
            echo,
            default().with_default_command_timeout(Duration::from_secs(5))
        ),
        [Duration::from_secs(5)]
    );
}

fn run_tool(tool: &RegisteredTool, dir: &Path, args: Value) -> Result<ToolOutput, String> {
    let env = LocalExecutionEnvironment::new(dir).unwrap();
    let cancel = CancelToken::new();
    let ctx = ToolContext::new(&env, "call_1", &cancel);
    (tool.executor)(ToolInput::Json(args.as_object().unwrap().clone()), &ctx)
}

#[test]
fn the_anthropic_grep_lists_files_or_counts_matches_per_file_on_request() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("src")).unwrap();
    std::fs::write(dir.path().join("src/a.rs"), "todo\nTODO later\ntodo\n").unwrap();
    std::fs::write(dir.path().join("src/b.rs"), "nothing\ntodo\n").unwrap();
    std::fs::write(dir.path().join("c.md"), "no match\n").unwrap();
    let grep = profiles::anthropic("claude-sonnet-4-5")
        .tool_registry
        .get("grep")
        .expect("the Anthropic profile has grep")
        .clone();
    let files = run_tool(
        &grep,
        dir.path(),
        json!({"pattern": "todo", "output_mode": "files_with_matches"}),
    )
    .unwrap();
    assert_eq!(files.text, "src/a.rs\nsrc/b.rs");
    let counts = run_tool(
        &grep,
        dir.path(),
        json!({"pattern": "todo", "output_mode": "count", "case_insensitive": true}),
    )
    .unwrap();
    assert_eq!(counts.text, "src/a.rs:3\nsrc/b.rs:1");
    let limited = run_tool(
        &grep,
        dir.path(),
        json!({"pattern": "todo", "output_mode": "files_with_matches", "max_results": 1}),
    )
    .unwrap();
    assert!(
        limited.text.starts_with("src/a.rs\n[Listed 1 of 2 files"),
        "{}",
        limited.text
    );
    let content = run_tool(&grep, dir.path(), json!({"pattern": "TODO"})).unwrap();
    assert_eq!(content.text, "src/a.rs:2:TODO later");
    let none = run_tool(
        &grep,
        dir.path(),
        json!({"pattern": "absent", "output_mode": "count"}),
    )
    .unwrap();
    assert_eq!(none.text, "No matches found for `absent`.");
}

#[test]
fn profiles_route_to_their_family_files_when_sent_to_another_provider() {
    let profile: ProviderProfile = profiles::gemini("gemini-2.5-flash").with_provider_id("proxy");
    assert_eq!(profile.id, "proxy");
    assert_eq!(profile.family, "gemini");
    let repo = repository();
    let env = LocalExecutionEnvironment::new(repo.path()).unwrap();
    let prompt = profile.build_system_prompt(&env);
    assert!(prompt.contains("GEMINI-ONLY") && !prompt.contains("CLAUDE-ONLY"));
}
