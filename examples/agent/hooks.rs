//! `agent --hooks FILE`: lifecycle hooks as shell commands, read from a JSON file and turned
//! into the library's [`Hooks`]. Commands run through the execution environment (own
//! process group, killed at their timeout); this file never spawns anything itself.
//!
//! The file maps each event to a list of commands:
//!
//! ```json
//! { "PreToolUse": [ { "matcher": "^shell$", "command": "./check.sh", "timeout_ms": 5000 } ] }
//! ```
//!
//! Event names are `PreToolUse`, `PostToolUse`, `UserPromptSubmit`, `Stop`, `SessionStart`,
//! `SessionEnd`, `SubagentStart`, `SubagentStop`, `PreCompact`, `PostCompact` (snake case
//! works too; the object may also sit under a top-level `"hooks"` key). `matcher` is a
//! regular expression on the tool name (tool events only; absent, empty or `*` matches
//! every tool); `timeout_ms` defaults to 60 000.
//!
//! A command gets the hook input as one JSON object on stdin and answers by exit status:
//! 0 goes on, and its stdout may hold a JSON decision (below); 2 blocks, with stderr as the
//! reason (the model reads it for `PreToolUse`, the host for `UserPromptSubmit`; for `Stop`
//! it continues the input with stderr as the message, for `PostToolUse` stderr is added to
//! what the model sees); any other status, or a timeout, is a warning — and for
//! `PreToolUse` and `UserPromptSubmit` a timeout or a failure to start is also a denial.
//!
//! The JSON decision on stdout (exit 0) has one of: `{"decision": "block", "reason": …}`
//! (`Stop`: continue with the reason), `{"arguments": {…}}` (replace a tool call's
//! arguments), `{"additional_context": "…"}`, `{"output": "…"}` (replace what the model
//! sees of a tool's output), `{"prompt": "…"}` (rewrite an input), `{"continue_with": "…"}`
//! (`Stop`), `{"summary": "…"}` (`PostCompact`). Plain non-JSON stdout is added as context
//! for `UserPromptSubmit`, `PostToolUse` and `PreCompact`, and ignored elsewhere.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use agentloop::CancelToken;
use agentloop::exec::{CommandRequest, ExecutionEnvironment};
use agentloop::session::{HookDecision, HookEvent, HookInput, Hooks};
use regex::Regex;
use serde_json::{Map, Value, json};

/// The default timeout of a hook command.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// One command of the file.
struct CommandHook {
    event: HookEvent,
    matcher: Option<Regex>,
    command: String,
    timeout: Duration,
}

/// Reads the hooks file at `path` into [`Hooks`] whose commands run in `env`.
pub fn load(path: &Path, env: Arc<dyn ExecutionEnvironment>) -> Result<Hooks, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the hooks file `{}`: {e}", path.display()))?;
    let value: Value = serde_json::from_str(&text)
        .map_err(|e| format!("the hooks file `{}` is not JSON: {e}", path.display()))?;
    let commands = parse(&value).map_err(|e| format!("hooks file `{}`: {e}", path.display()))?;
    let mut hooks = Hooks::new();
    for command in commands {
        let env = env.clone();
        let event = command.event;
        hooks = hooks.on(event, move |input| command.run(input, &*env));
    }
    Ok(hooks)
}

fn parse(value: &Value) -> Result<Vec<CommandHook>, String> {
    let root = value.get("hooks").unwrap_or(value);
    let Some(events) = root.as_object() else {
        return Err("expected an object of events".to_string());
    };
    let mut out = Vec::new();
    for (name, entries) in events {
        let event = HookEvent::ALL
            .into_iter()
            .find(|e| e.pascal_name() == name || e.name() == name)
            .ok_or_else(|| format!("unknown event `{name}`"))?;
        let Some(entries) = entries.as_array() else {
            return Err(format!("`{name}` must be a list of commands"));
        };
        for entry in entries {
            out.push(parse_entry(event, entry).map_err(|e| format!("{name}: {e}"))?);
        }
    }
    Ok(out)
}

fn parse_entry(event: HookEvent, entry: &Value) -> Result<CommandHook, String> {
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
    Ok(CommandHook {
        event,
        matcher,
        command,
        timeout,
    })
}

impl CommandHook {
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

    #[test]
    fn the_file_format_accepts_both_spellings_and_rejects_mistakes() {
        let file = json!({"hooks": {
            "PreToolUse": [{"matcher": "^shell$", "command": "true", "timeout_ms": 100}],
            "post_tool_use": [{"command": "true"}],
        }});
        let parsed = parse(&file).unwrap();
        assert_eq!(parsed.len(), 2);
        assert_eq!(parsed[0].timeout, Duration::from_millis(100));
        assert_eq!(parsed[1].timeout, DEFAULT_TIMEOUT);
        assert!(parse(&json!({"Nope": []})).is_err());
        assert!(parse(&json!({"Stop": [{"command": ""}]})).is_err());
        assert!(parse(&json!({"Stop": [{"command": "x", "matcher": "("}]})).is_err());
        assert!(parse(&json!({"Stop": [{"command": "x", "timeout_ms": 0}]})).is_err());
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
