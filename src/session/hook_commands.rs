//! Hook commands: the hooks file Claude Code and Codex use, parsed ([`HookCommands::parse`]),
//! and each of its shell commands made a [`Hook`](super::Hook) that runs the command through
//! the session's [`ExecutionEnvironment`] (in its own process group, killed at its timeout).
//! This file never spawns anything itself.
//!
//! The format and the rules are in [`HookCommands`]' docs.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use regex::Regex;
use serde_json::{Map, Value, json};

use super::hooks::{HookDecision, HookEvent, HookInput, Hooks};
use crate::cancel::CancelToken;
use crate::error::{Error, ErrorKind, Result};
use crate::exec::{CommandRequest, ExecutionEnvironment};

/// The default timeout of a hook command.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// The commands of a hooks file: parse the file's text, then add the commands to a
/// session's [`Hooks`]. Each command runs through the session's
/// [`ExecutionEnvironment`], in its own process group, killed at its timeout.
///
/// The file maps each event to a list of commands:
///
/// ```json
/// { "PreToolUse": [ { "matcher": "^shell$", "command": "./check.sh", "timeout_ms": 5000 } ] }
/// ```
///
/// Event names are `PreToolUse`, `PostToolUse`, `UserPromptSubmit`, `Stop`, `SessionStart`,
/// `SessionEnd`, `SubagentStart`, `SubagentStop`, `PreCompact`, `PostCompact` (snake case
/// works too; the object may also sit under a top-level `"hooks"` key). `matcher` is a
/// regular expression on the tool name (tool events only; absent, empty or `*` matches
/// every tool); `timeout_ms` defaults to 60 000.
///
/// A command gets the hook input as one JSON object on stdin and answers by exit status:
/// 0 goes on, and its stdout may hold a JSON decision (below); 2 blocks, with stderr as the
/// reason (the model reads it for `PreToolUse`, the host for `UserPromptSubmit`; for `Stop`
/// it continues the input with stderr as the message, for `PostToolUse` stderr is added to
/// what the model sees); any other status, or a timeout, is a warning — and for
/// `PreToolUse` and `UserPromptSubmit` a timeout or a failure to start is also a denial.
///
/// The JSON decision on stdout (exit 0) has one of: `{"decision": "block", "reason": …}`
/// (`Stop`: continue with the reason), `{"arguments": {…}}` (replace a tool call's
/// arguments), `{"additional_context": "…"}`, `{"output": "…"}` (replace what the model
/// sees of a tool's output), `{"prompt": "…"}` (rewrite an input), `{"continue_with": "…"}`
/// (`Stop`), `{"summary": "…"}` (`PostCompact`). Plain non-JSON stdout is added as context
/// for `UserPromptSubmit`, `PostToolUse` and `PreCompact`, and ignored elsewhere.
///
/// ```
/// use std::sync::Arc;
/// use agentloop::exec::LocalExecutionEnvironment;
/// use agentloop::session::{HookCommands, Hooks, SessionConfig};
///
/// let commands = HookCommands::parse(r#"{"PreToolUse": [
///     {"matcher": "^shell$", "command": "./check.sh", "timeout_ms": 5000}
/// ]}"#)?;
/// assert_eq!(commands.len(), 1);
/// let env = Arc::new(LocalExecutionEnvironment::new(std::env::temp_dir())?);
/// let config = SessionConfig::default().with_hooks(commands.add_to(Hooks::new(), env));
/// # let _ = config;
/// # Ok::<(), agentloop::Error>(())
/// ```
#[derive(Clone, Default)]
pub struct HookCommands {
    commands: Vec<HookCommand>,
}

/// One command of the file.
#[derive(Clone)]
struct HookCommand {
    event: HookEvent,
    matcher: Option<Regex>,
    command: String,
    timeout: Duration,
}

impl fmt::Debug for HookCommands {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(
                self.commands
                    .iter()
                    .map(|c| (c.event.name(), &c.command, c.timeout)),
            )
            .finish()
    }
}

impl HookCommands {
    /// Reads the text of a hooks file. A configuration error names what is wrong (text
    /// that is not JSON, an unknown event, an entry without a command, a matcher that is
    /// not a regular expression, a `timeout_ms` that is not a positive whole number);
    /// prefix it with where the text came from.
    pub fn parse(text: &str) -> Result<HookCommands> {
        let value: Value = serde_json::from_str(text).map_err(|e| bad(format!("not JSON: {e}")))?;
        parse_value(&value).map_err(bad)
    }

    /// How many commands the file holds.
    pub fn len(&self) -> usize {
        self.commands.len()
    }

    /// Whether the file holds no command.
    pub fn is_empty(&self) -> bool {
        self.commands.is_empty()
    }

    /// `hooks` with these commands added after its own hooks, in the file's order, each
    /// run in `env` when its event fires.
    pub fn add_to(self, mut hooks: Hooks, env: Arc<dyn ExecutionEnvironment>) -> Hooks {
        for command in self.commands {
            let env = env.clone();
            let event = command.event;
            hooks = hooks.on(event, move |input| command.run(input, &*env));
        }
        hooks
    }
}

fn bad(message: String) -> Error {
    Error::new(ErrorKind::Configuration, message)
}

fn parse_value(value: &Value) -> std::result::Result<HookCommands, String> {
    let root = value.get("hooks").unwrap_or(value);
    let Some(events) = root.as_object() else {
        return Err("expected an object of events".to_string());
    };
    let mut commands = Vec::new();
    for (name, entries) in events {
        let event = HookEvent::ALL
            .into_iter()
            .find(|e| e.pascal_name() == name || e.name() == name)
            .ok_or_else(|| format!("unknown event `{name}`"))?;
        let Some(entries) = entries.as_array() else {
            return Err(format!("`{name}` must be a list of commands"));
        };
        for entry in entries {
            commands.push(parse_entry(event, entry).map_err(|e| format!("{name}: {e}"))?);
        }
    }
    Ok(HookCommands { commands })
}

fn parse_entry(event: HookEvent, entry: &Value) -> std::result::Result<HookCommand, String> {
    let command = entry["command"]
        .as_str()
        .filter(|c| !c.trim().is_empty())
        .ok_or("each entry needs a non-empty \"command\"")?
        .to_string();
    let matcher = match entry["matcher"].as_str() {
        None | Some("") | Some("*") => None,
        Some(pattern) => Some(
            Regex::new(pattern).map_err(|e| format!("matcher `{pattern}` is not a regex: {e}"))?,
        ),
    };
    let timeout = match &entry["timeout_ms"] {
        Value::Null => DEFAULT_TIMEOUT,
        value => match value.as_u64() {
            Some(ms) if ms > 0 => Duration::from_millis(ms),
            _ => return Err("\"timeout_ms\" must be a positive whole number".to_string()),
        },
    };
    Ok(HookCommand {
        event,
        matcher,
        command,
        timeout,
    })
}

impl HookCommand {
    fn run(&self, input: &HookInput, env: &dyn ExecutionEnvironment) -> HookDecision {
        if let (Some(matcher), Some(tool)) = (&self.matcher, &input.tool_name) {
            if !matcher.is_match(tool) {
                return HookDecision::Continue;
            }
        }
        let request =
            CommandRequest::new(self.command.clone(), self.timeout).with_stdin(payload(input));
        let result = match env.exec_command(&request, &|_, _| {}, &CancelToken::new()) {
            Ok(result) => result,
            Err(err) => {
                return HookDecision::Fail(format!("`{}` could not run: {err}", self.command));
            }
        };
        if result.timed_out {
            return HookDecision::Fail(format!(
                "`{}` timed out after {} ms",
                self.command,
                self.timeout.as_millis()
            ));
        }
        let stderr = result.stderr.trim().to_string();
        match result.exit_code {
            Some(0) => self.decision(result.stdout.trim()),
            Some(2) => {
                let reason = if stderr.is_empty() {
                    format!("blocked by the hook command `{}`", self.command)
                } else {
                    stderr
                };
                match self.event {
                    HookEvent::PreToolUse | HookEvent::UserPromptSubmit => {
                        HookDecision::Deny(reason)
                    }
                    HookEvent::Stop => HookDecision::ContinueWith(reason),
                    HookEvent::PostToolUse => HookDecision::AddContext(reason),
                    _ => HookDecision::Warn(reason),
                }
            }
            status => HookDecision::Warn(format!(
                "`{}` exited with {}{}",
                self.command,
                status.map_or("a signal".to_string(), |s| format!("status {s}")),
                if stderr.is_empty() {
                    String::new()
                } else {
                    format!(": {stderr}")
                }
            )),
        }
    }

    /// The decision in a successful command's stdout.
    fn decision(&self, stdout: &str) -> HookDecision {
        if stdout.is_empty() {
            return HookDecision::Continue;
        }
        let Ok(Value::Object(answer)) = serde_json::from_str::<Value>(stdout) else {
            return match self.event {
                HookEvent::UserPromptSubmit | HookEvent::PostToolUse | HookEvent::PreCompact => {
                    HookDecision::AddContext(stdout.to_string())
                }
                _ => HookDecision::Continue,
            };
        };
        decision_of(self.event, &answer)
    }
}

fn decision_of(event: HookEvent, answer: &Map<String, Value>) -> HookDecision {
    let text = |key: &str| answer.get(key).and_then(Value::as_str).map(str::to_string);
    if matches!(text("decision").as_deref(), Some("block" | "deny")) {
        let reason = text("reason").unwrap_or_else(|| "blocked by a hook".to_string());
        return match event {
            HookEvent::Stop => HookDecision::ContinueWith(reason),
            _ => HookDecision::Deny(reason),
        };
    }
    if let Some(arguments) = answer.get("arguments").or(answer.get("tool_input")) {
        return HookDecision::ReplaceArguments(arguments.clone());
    }
    if let Some(output) = text("output") {
        return HookDecision::ReplaceOutput(output);
    }
    if let Some(prompt) = text("prompt") {
        return HookDecision::ReplacePrompt(prompt);
    }
    if let Some(message) = text("continue_with") {
        return HookDecision::ContinueWith(message);
    }
    if let Some(summary) = text("summary") {
        return HookDecision::ReplaceSummary(summary);
    }
    if let Some(context) = text("additional_context").or(text("additionalContext")) {
        return HookDecision::AddContext(context);
    }
    HookDecision::Continue
}

/// The JSON object a command reads on stdin: the library's hook input plus the names
/// Claude Code and Codex hooks read (`hook_event_name`, `tool_input`, `tool_response`).
fn payload(input: &HookInput) -> Vec<u8> {
    let mut value = serde_json::to_value(input).unwrap_or_else(|_| json!({}));
    if let Value::Object(map) = &mut value {
        map.insert(
            "hook_event_name".to_string(),
            json!(input.event.pascal_name()),
        );
        if let Some(arguments) = &input.arguments {
            map.insert("tool_input".to_string(), arguments.clone());
        }
        if let Some(output) = &input.output {
            map.insert("tool_response".to_string(), json!(output));
        }
    }
    let mut bytes = value.to_string().into_bytes();
    bytes.push(b'\n');
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error_of(text: &str) -> String {
        let err = HookCommands::parse(text).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Configuration);
        err.to_string()
    }

    #[test]
    fn a_valid_file_gives_its_commands_in_order_with_both_spellings() {
        let file = json!({"hooks": {
            "PreToolUse": [{"matcher": "^shell$", "command": "true", "timeout_ms": 100}],
            "post_tool_use": [{"command": "true", "matcher": "*"}],
        }});
        let parsed = HookCommands::parse(&file.to_string()).unwrap();
        assert_eq!(parsed.len(), 2);
        let [pre, post] = &parsed.commands[..] else {
            panic!("two commands")
        };
        assert_eq!(pre.event, HookEvent::PreToolUse);
        assert_eq!(pre.timeout, Duration::from_millis(100));
        assert!(pre.matcher.as_ref().is_some_and(|m| m.is_match("shell")));
        assert_eq!(post.event, HookEvent::PostToolUse);
        assert_eq!(post.timeout, DEFAULT_TIMEOUT);
        assert!(post.matcher.is_none(), "`*` matches every tool");
        assert!(HookCommands::parse("{}").unwrap().is_empty());
    }

    #[test]
    fn each_mistake_in_a_file_is_a_configuration_error_that_names_it() {
        assert!(error_of("not json").starts_with("not JSON: "));
        assert_eq!(error_of("[]"), "expected an object of events");
        assert_eq!(error_of(r#"{"Nope": []}"#), "unknown event `Nope`");
        assert_eq!(
            error_of(r#"{"Stop": {"command": "x"}}"#),
            "`Stop` must be a list of commands"
        );
        assert_eq!(
            error_of(r#"{"Stop": [{"command": " "}]}"#),
            "Stop: each entry needs a non-empty \"command\""
        );
        assert!(
            error_of(r#"{"Stop": [{"command": "x", "matcher": "("}]}"#)
                .starts_with("Stop: matcher `(` is not a regex: ")
        );
        for timeout in ["0", "-5", "1.5", "\"100\""] {
            assert_eq!(
                error_of(&format!(
                    r#"{{"Stop": [{{"command": "x", "timeout_ms": {timeout}}}]}}"#
                )),
                "Stop: \"timeout_ms\" must be a positive whole number",
                "{timeout}"
            );
        }
    }

    #[test]
    fn stdout_decisions_map_to_the_library_decisions() {
        let answer = |v: Value| v.as_object().unwrap().clone();
        assert_eq!(
            decision_of(
                HookEvent::Stop,
                &answer(json!({"decision": "block", "reason": "again"}))
            ),
            HookDecision::ContinueWith("again".into())
        );
        assert_eq!(
            decision_of(
                HookEvent::PreToolUse,
                &answer(json!({"arguments": {"a": 1}}))
            ),
            HookDecision::ReplaceArguments(json!({"a": 1}))
        );
        assert_eq!(
            decision_of(
                HookEvent::PostToolUse,
                &answer(json!({"additional_context": "lint ok"}))
            ),
            HookDecision::AddContext("lint ok".into())
        );
    }
}
