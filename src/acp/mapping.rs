//! The one place where agentloop's events become ACP v1 messages: session updates, tool call
//! kinds, titles, locations and content, plans, usage, stop reasons, and the replay of a
//! recorded history. Pure functions of their inputs: they never send, read files or block,
//! so a v2 mapping can sit beside this one.
//!
//! | agentloop | ACP v1 |
//! |---|---|
//! | `ASSISTANT_TEXT_DELTA` | `agent_message_chunk` (text) |
//! | `ASSISTANT_REASONING_DELTA` | `agent_thought_chunk` (text) |
//! | `ASSISTANT_TEXT_END` with a refusal | `agent_message_chunk` with the refusal text |
//! | `ASSISTANT_TEXT_END` usage | `usage_update` `{used: input + output tokens of the call, size: the context window, cost: the session's USD so far}` |
//! | `TOOL_CALL_START` | `tool_call` `{toolCallId, title, kind, status, rawInput, locations}`: status `pending` when the call will ask for permission, else `in_progress` |
//! | `APPROVAL_REQUESTED` (also a subagent's) | `session/request_permission` with the call (and, for a write or an edit, the proposed `diff`) and the options `allow_once`, `allow_always`, `reject_once`, `reject_always`; allowed → `tool_call_update` `in_progress` |
//! | `TOOL_CALL_OUTPUT_DELTA` | `tool_call_update` with the output so far as text content (at most every 200 ms, the last 64 KiB) |
//! | `TOOL_CALL_END` | `tool_call_update` `completed` or `failed`; content: a `diff` per changed file for edits (whole file before → after), the output or error as text otherwise (at most 256 KiB) |
//! | `PLAN_UPDATE` | `plan` `{entries: [{content, priority: "medium", status}]}` (cancelled steps left out); the plan tool's own call is not shown as a tool call |
//! | `PROCESSING_END` | the `session/prompt` answer: `stopReason` (below) and `usage` `{totalTokens, inputTokens, outputTokens, thoughtTokens?, cachedReadTokens?, cachedWriteTokens?}` |
//! | `ERROR` ending an input | the `session/prompt` answer is a JSON-RPC error (`-32603`) with the error's message |
//! | history on `session/load` | `user_message_chunk` per user or steering message, `agent_thought_chunk` and `agent_message_chunk` per answer, `tool_call` + `tool_call_update` per call with its result |
//!
//! | stop reason | `stopReason` |
//! |---|---|
//! | `completed` | `end_turn`; `max_tokens` when the last answer was cut by the output limit (`length`); `refusal` when the model refused (a refusal text or `content_filter`) |
//! | `turn_limit`, `round_limit` | `max_turn_requests` |
//! | `interrupted`, `aborted` | `cancelled` |
//! | `blocked` (a `user_prompt_submit` hook) | `refusal` |
//! | `error` | no stop reason: a JSON-RPC error |
//!
//! | tool | `kind` | title |
//! |---|---|---|
//! | `read_file`, `read_many_files` | `read` | `Read PATH` |
//! | `write_file`, `edit_file`, `apply_patch` | `edit` | `Write PATH`, `Edit PATH`, `Patch PATHS` |
//! | `shell` | `execute` | the command line |
//! | `grep`, `glob`, `list_dir` | `search` | `grep PATTERN`, `Find PATTERN`, `List PATH` |
//! | the plan tools | `think` | not shown (a `plan` instead) |
//! | subagent tools, MCP and host tools | `other` | the tool name (`spawn_agent`: its task) |
//!
//! Locations are the absolute paths a call names (`file_path`, `path`, the files of a
//! patch), with the first line for a read that starts at an offset.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

use crate::llm::{FinishKind, Usage};
use crate::session::{StopReason, Turn};
use crate::tools::{PlanEntry, PlanStatus};

/// Most text of a tool's output sent in one update (head and tail kept).
const MAX_TEXT: usize = 256 * 1024;

/// Whether `tool` is a plan tool (shown as a `plan`, not as a tool call).
pub(crate) fn is_plan_tool(tool: &str) -> bool {
    matches!(tool, "update_plan" | "todo_write" | "write_todos")
}

/// The ACP tool kind of a tool.
pub(crate) fn kind(tool: &str) -> &'static str {
    match tool {
        "read_file" | "read_many_files" => "read",
        "write_file" | "edit_file" | "apply_patch" => "edit",
        "shell" => "execute",
        "grep" | "glob" | "list_dir" => "search",
        tool if is_plan_tool(tool) => "think",
        _ => "other",
    }
}

fn arg<'a>(args: &'a Value, name: &str) -> Option<&'a str> {
    args.get(name).and_then(Value::as_str)
}

/// A line of text cut to `max` characters, for titles.
fn short(text: &str, max: usize) -> String {
    let line = text.lines().next().unwrap_or("");
    match line.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &line[..at]),
        None if line.len() < text.trim_end().len() => format!("{line} …"),
        None => line.to_string(),
    }
}

/// The text of a patch, whether the call was freeform (a string) or JSON (`patch`).
fn patch_text(args: &Value) -> Option<&str> {
    args.as_str().or_else(|| arg(args, "patch"))
}

/// The files a patch names: added, updated, deleted and moved-to paths, in order.
pub(crate) fn patch_paths(patch: &str) -> Vec<String> {
    let mut paths = Vec::new();
    for line in patch.lines() {
        for header in [
            "*** Add File: ",
            "*** Update File: ",
            "*** Delete File: ",
            "*** Move to: ",
        ] {
            if let Some(path) = line.strip_prefix(header) {
                let path = path.trim().to_string();
                if !path.is_empty() && !paths.contains(&path) {
                    paths.push(path);
                }
            }
        }
    }
    paths
}

/// `path` made absolute against `cwd`.
fn absolute(cwd: &Path, path: &str) -> PathBuf {
    crate::exec::normalize(&cwd.join(path))
}

/// The files an editing call changes, absolute (for the before and after images).
pub(crate) fn edited_files(tool: &str, args: &Value, cwd: &Path) -> Vec<PathBuf> {
    let names = match tool {
        "write_file" | "edit_file" => arg(args, "file_path").map(|p| vec![p.to_string()]),
        "apply_patch" => patch_text(args).map(patch_paths),
        _ => None,
    };
    names
        .unwrap_or_default()
        .iter()
        .map(|p| absolute(cwd, p))
        .collect()
}

/// A short human title for a call.
pub(crate) fn title(tool: &str, args: &Value) -> String {
    let path = arg(args, "file_path").or_else(|| arg(args, "path"));
    match (tool, path) {
        ("shell", _) => short(arg(args, "command").unwrap_or("shell"), 200),
        ("read_file", Some(path)) => format!("Read {path}"),
        ("read_many_files", _) => match args.get("paths").and_then(Value::as_array) {
            Some(paths) => format!("Read {} files", paths.len()),
            None => "Read files".to_string(),
        },
        ("write_file", Some(path)) => format!("Write {path}"),
        ("edit_file", Some(path)) => format!("Edit {path}"),
        ("apply_patch", _) => {
            let paths = patch_text(args).map(patch_paths).unwrap_or_default();
            short(&format!("Patch {}", paths.join(", ")), 200)
        }
        ("grep", _) => format!("grep {}", short(arg(args, "pattern").unwrap_or(""), 120)),
        ("glob", _) => format!("Find {}", short(arg(args, "pattern").unwrap_or(""), 120)),
        ("list_dir", path) => format!("List {}", path.unwrap_or(".")),
        ("spawn_agent", _) => format!("Subagent: {}", short(arg(args, "task").unwrap_or(""), 120)),
        (tool, _) => tool.to_string(),
    }
}

/// The files a call names, absolute, with the first line of a read at an offset.
pub(crate) fn locations(tool: &str, args: &Value, cwd: &Path) -> Vec<Value> {
    let line = args.get("offset").and_then(Value::as_u64);
    let one = |path: &str| {
        let mut location = json!({"path": absolute(cwd, path)});
        if let (Some(line), "read_file") = (line, tool) {
            location["line"] = json!(line);
        }
        location
    };
    match tool {
        "apply_patch" => patch_text(args)
            .map(patch_paths)
            .unwrap_or_default()
            .iter()
            .map(|p| one(p))
            .collect(),
        "read_many_files" => Vec::new(),
        _ => arg(args, "file_path")
            .or_else(|| {
                if kind(tool) == "search" {
                    None
                } else {
                    arg(args, "path")
                }
            })
            .map(one)
            .into_iter()
            .collect(),
    }
}

/// A `session/update` body of kind `update`, with `fields`.
fn update(update: &str, fields: Value) -> Value {
    let mut object = match fields {
        Value::Object(map) => map,
        _ => Map::new(),
    };
    object.insert("sessionUpdate".to_string(), json!(update));
    Value::Object(object)
}

/// `agent_message_chunk`, `agent_thought_chunk` or `user_message_chunk` with `text`.
pub(crate) fn chunk(kind: &str, text: &str) -> Value {
    update(kind, json!({"content": {"type": "text", "text": text}}))
}

/// The `tool_call` announcing a call.
pub(crate) fn tool_call(id: &str, tool: &str, args: &Value, status: &str, cwd: &Path) -> Value {
    update(
        "tool_call",
        json!({
            "toolCallId": id,
            "title": title(tool, args),
            "kind": kind(tool),
            "status": status,
            "rawInput": args,
            "locations": locations(tool, args, cwd),
        }),
    )
}

/// The call as a permission request shows it (a `ToolCallUpdate`), with `content`.
pub(crate) fn permission_call(
    id: &str,
    tool: &str,
    args: &Value,
    content: Vec<Value>,
    cwd: &Path,
) -> Value {
    json!({
        "toolCallId": id,
        "title": title(tool, args),
        "kind": kind(tool),
        "status": "pending",
        "rawInput": args,
        "locations": locations(tool, args, cwd),
        "content": content,
    })
}

/// The options of every permission request: their ids are their kinds.
pub(crate) fn permission_options() -> Value {
    json!([
        {"optionId": "allow_once", "name": "Allow", "kind": "allow_once"},
        {"optionId": "allow_always", "name": "Always allow", "kind": "allow_always"},
        {"optionId": "reject_once", "name": "Reject", "kind": "reject_once"},
        {"optionId": "reject_always", "name": "Always reject", "kind": "reject_always"},
    ])
}

/// A `tool_call_update` of `id` with `fields`.
pub(crate) fn tool_call_update(id: &str, fields: Value) -> Value {
    let mut update = update("tool_call_update", fields);
    update["toolCallId"] = json!(id);
    update
}

/// Text content of a tool call, cut to its head and tail when long.
pub(crate) fn text_content(text: &str) -> Value {
    let text = if text.len() > MAX_TEXT {
        let head = floor(text, MAX_TEXT / 2);
        let tail = ceil(text, text.len() - MAX_TEXT / 2);
        format!(
            "{}\n[… {} bytes left out …]\n{}",
            &text[..head],
            tail - head,
            &text[tail..]
        )
    } else {
        text.to_string()
    };
    json!({"type": "content", "content": {"type": "text", "text": text}})
}

/// The running output of a command as content: the last 64 KiB.
pub(crate) fn output_content(output: &str) -> Value {
    let from = ceil(output, output.len().saturating_sub(64 * 1024));
    json!({"type": "content", "content": {"type": "text", "text": &output[from..]}})
}

fn floor(text: &str, mut at: usize) -> usize {
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

fn ceil(text: &str, mut at: usize) -> usize {
    while !text.is_char_boundary(at) {
        at += 1;
    }
    at
}

/// A `diff` of `path` from `old` (`None`: the file was new) to `new`.
pub(crate) fn diff(path: &Path, old: Option<&str>, new: &str) -> Value {
    json!({"type": "diff", "path": path, "oldText": old, "newText": new})
}

/// The `plan` update of a plan's steps.
pub(crate) fn plan(entries: &[PlanEntry]) -> Value {
    let entries: Vec<Value> = entries
        .iter()
        .filter_map(|entry| {
            let status = match entry.status {
                PlanStatus::Pending => "pending",
                PlanStatus::InProgress => "in_progress",
                PlanStatus::Completed => "completed",
                _ => return None,
            };
            Some(json!({"content": entry.content, "priority": "medium", "status": status}))
        })
        .collect();
    update("plan", json!({"entries": entries}))
}

/// The `usage_update` after a model call.
pub(crate) fn usage_update(call: &Usage, window: usize, cost_usd: Option<f64>) -> Value {
    let mut fields = json!({
        "used": call.input_tokens + call.output_tokens,
        "size": window,
    });
    if let Some(cost) = cost_usd {
        fields["cost"] = json!({"amount": cost, "currency": "USD"});
    }
    update("usage_update", fields)
}

/// The `usage` of a prompt's answer.
pub(crate) fn prompt_usage(usage: &Usage) -> Value {
    let mut object = json!({
        "totalTokens": usage.total_tokens,
        "inputTokens": usage.input_tokens,
        "outputTokens": usage.output_tokens,
    });
    for (name, value) in [
        ("thoughtTokens", usage.reasoning_tokens),
        ("cachedReadTokens", usage.cache_read_tokens),
        ("cachedWriteTokens", usage.cache_write_tokens),
    ] {
        if let Some(value) = value {
            object[name] = json!(value);
        }
    }
    object
}

/// The `stopReason` of an input that stopped for `stop`, its last answer having finished
/// for `finish` (refused when `refused`); `None` for an error (a JSON-RPC error instead).
pub(crate) fn stop_reason(
    stop: StopReason,
    finish: Option<FinishKind>,
    refused: bool,
) -> Option<&'static str> {
    Some(match stop {
        StopReason::Completed if refused || finish == Some(FinishKind::ContentFilter) => "refusal",
        StopReason::Completed if finish == Some(FinishKind::Length) => "max_tokens",
        StopReason::Completed => "end_turn",
        StopReason::TurnLimit | StopReason::RoundLimit => "max_turn_requests",
        StopReason::Interrupted | StopReason::Aborted => "cancelled",
        StopReason::Blocked => "refusal",
        // A budget the host set ran out: the nearest of ACP's reasons (a limit reached).
        StopReason::BudgetExhausted => "max_tokens",
        StopReason::Error | StopReason::StructuredOutputFailed => return None,
    })
}

/// The updates that replay a recorded history, in order.
pub(crate) fn replay(turns: &[Turn], cwd: &Path) -> Vec<Value> {
    let mut out = Vec::new();
    let mut calls: Vec<crate::llm::ToolCall> = Vec::new();
    for turn in turns {
        match turn {
            Turn::User(user) => out.push(chunk("user_message_chunk", &user.content)),
            Turn::Steering(steering) => {
                out.push(chunk("user_message_chunk", &steering.content));
            }
            Turn::Assistant(answer) => {
                if let Some(reasoning) = answer.reasoning.as_deref().filter(|r| !r.is_empty()) {
                    out.push(chunk("agent_thought_chunk", reasoning));
                }
                if !answer.content.is_empty() {
                    out.push(chunk("agent_message_chunk", &answer.content));
                }
                for call in &answer.tool_calls {
                    if !is_plan_tool(&call.name) {
                        out.push(tool_call(
                            &call.id,
                            &call.name,
                            &call.arguments,
                            "in_progress",
                            cwd,
                        ));
                    }
                }
                calls.extend(answer.tool_calls.iter().cloned());
            }
            Turn::ToolResults(results) => {
                for result in &results.results {
                    let call = calls.iter().find(|c| c.id == result.tool_call_id);
                    match call {
                        Some(call) if is_plan_tool(&call.name) => {
                            if let Some((entries, _)) =
                                crate::tools::plan::plan_of(&call.name, &call.arguments)
                            {
                                out.push(plan(&entries));
                            }
                        }
                        _ => out.push(tool_call_update(
                            &result.tool_call_id,
                            json!({
                                "status": if result.is_error { "failed" } else { "completed" },
                                "content": [text_content(&result.content)],
                            }),
                        )),
                    }
                }
            }
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_tool_has_its_kind_and_a_title_that_says_what_it_does() {
        let cwd = Path::new("/work");
        let cases = [
            (
                "shell",
                json!({"command": "cargo test\nmore"}),
                "execute",
                "cargo test …",
            ),
            (
                "read_file",
                json!({"file_path": "a.rs", "offset": 3}),
                "read",
                "Read a.rs",
            ),
            (
                "edit_file",
                json!({"file_path": "a.rs"}),
                "edit",
                "Edit a.rs",
            ),
            (
                "write_file",
                json!({"file_path": "b.rs"}),
                "edit",
                "Write b.rs",
            ),
            (
                "grep",
                json!({"pattern": "fn main"}),
                "search",
                "grep fn main",
            ),
            ("glob", json!({"pattern": "*.rs"}), "search", "Find *.rs"),
            ("mcp_tool", json!({}), "other", "mcp_tool"),
        ];
        for (tool, args, kind_, title_) in cases {
            assert_eq!(kind(tool), kind_, "{tool}");
            assert_eq!(title(tool, &args), title_, "{tool}");
        }
        let read = locations(
            "read_file",
            &json!({"file_path": "src/a.rs", "offset": 3}),
            cwd,
        );
        assert_eq!(read, [json!({"path": "/work/src/a.rs", "line": 3})]);
        let patch = "*** Begin Patch\n*** Update File: a.rs\n*** Move to: b.rs\n@@\n-x\n+y\n*** Add File: c.rs\n+z\n*** End Patch";
        assert_eq!(patch_paths(patch), ["a.rs", "b.rs", "c.rs"]);
        assert_eq!(locations("apply_patch", &json!(patch), cwd).len(), 3);
        assert_eq!(
            edited_files("apply_patch", &json!({"patch": patch}), cwd),
            [cwd.join("a.rs"), cwd.join("b.rs"), cwd.join("c.rs")]
        );
        assert!(locations("grep", &json!({"path": "src"}), cwd).is_empty());
    }

    #[test]
    fn stop_reasons_follow_the_table() {
        assert_eq!(
            stop_reason(StopReason::Completed, Some(FinishKind::Stop), false),
            Some("end_turn")
        );
        assert_eq!(
            stop_reason(StopReason::Completed, Some(FinishKind::Length), false),
            Some("max_tokens")
        );
        assert_eq!(
            stop_reason(StopReason::Completed, None, true),
            Some("refusal")
        );
        assert_eq!(
            stop_reason(StopReason::RoundLimit, None, false),
            Some("max_turn_requests")
        );
        assert_eq!(
            stop_reason(StopReason::Interrupted, None, false),
            Some("cancelled")
        );
        assert_eq!(stop_reason(StopReason::Error, None, false), None);
    }

    #[test]
    fn long_output_keeps_its_head_and_tail_on_character_boundaries() {
        let text = "é".repeat(MAX_TEXT);
        let content = text_content(&text);
        let shown = content["content"]["text"].as_str().unwrap();
        assert!(shown.len() < MAX_TEXT + 100);
        assert!(shown.starts_with('é') && shown.ends_with('é'));
    }
}
