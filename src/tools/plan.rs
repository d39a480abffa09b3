//! The plan tool: the model keeps a list of steps, each `pending`, `in_progress` or
//! `completed`, and sends the whole list again whenever a step changes. The session turns
//! each successful call into a `PLAN_UPDATE` event (and an ACP host into a `plan` update);
//! the tool itself only checks the list and says so. It never touches files or processes.
//!
//! Each profile offers it under the name and shape of the step-list tool its provider's own
//! agent trained the model on. The tool lists those agents send today (Codex 0.169, Claude
//! Code 2.1.330, gemini-cli 0.61, in `peer-tools/`) hold no step-list tool at all (Codex
//! moved to goals, gemini-cli to topics); the nearest each agent offered is its last
//! step-list tool, so that is the shape kept:
//!
//! | profile | name | arguments | as the native agent's |
//! |---|---|---|---|
//! | `openai` | `update_plan` | `plan: [{step, status}]`, `explanation?` | Codex `update_plan` |
//! | `anthropic` | `todo_write` | `todos: [{content, status, activeForm?}]` | Claude Code `TodoWrite` (our names are snake case) |
//! | `gemini` | `write_todos` | `todos: [{description, status}]`; `cancelled` too | gemini-cli `write_todos` |

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{RegisteredTool, ToolContext, ToolDefinition, ToolInput, ToolOutput, args};
use crate::llm::tool_schema::tool_schema;

/// Codex's name.
pub const UPDATE_PLAN: &str = "update_plan";
/// Claude Code's `TodoWrite`, in our snake case.
pub const TODO_WRITE: &str = "todo_write";
/// gemini-cli's name.
pub const WRITE_TODOS: &str = "write_todos";

/// One step of a plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PlanEntry {
    /// What the step is.
    pub content: String,
    /// Where it stands.
    pub status: PlanStatus,
}

/// Where a plan step stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum PlanStatus {
    /// Not started.
    Pending,
    /// Being worked on (one step at a time).
    InProgress,
    /// Done.
    Completed,
    /// Dropped (gemini-cli's shape has it).
    Cancelled,
}

impl PlanStatus {
    fn parse(text: &str) -> Option<PlanStatus> {
        Some(match text {
            "pending" => PlanStatus::Pending,
            "in_progress" => PlanStatus::InProgress,
            "completed" => PlanStatus::Completed,
            "cancelled" => PlanStatus::Cancelled,
            _ => return None,
        })
    }
}

const DESCRIPTION: &str = "\
Keep a short plan of the task as a list of steps, and show the user where you are. Send the \
whole list each time: every step with its status (`pending`, `in_progress` or `completed`), \
at most one `in_progress`. Use it for work of several steps; update it as each step starts \
and finishes. It changes nothing in the workspace.";

/// Codex's shape: `{"plan": [{"step", "status"}], "explanation"?}`.
pub fn update_plan() -> RegisteredTool {
    let definition = ToolDefinition {
        name: UPDATE_PLAN.to_string(),
        description: DESCRIPTION.to_string(),
        parameters: tool_schema!({
            "type": "object",
            "properties": {
                "explanation": {"type": "string", "description": "Why the plan changed (optional)."},
                "plan": {
                    "type": "array",
                    "description": "Every step, in order.",
                    "items": {
                        "type": "object",
                        "properties": {
                            "step": {"type": "string"},
                            "status": {"type": "string", "enum": ["pending", "in_progress", "completed"]}
                        },
                        "required": ["step", "status"],
                        "additionalProperties": false
                    }
                }
            },
            "required": ["plan"],
            "additionalProperties": false
        }),
        freeform: None,
    };
    RegisteredTool::new(definition, execute)
}

/// Claude Code's shape: `{"todos": [{"content", "status", "activeForm"?}]}`.
pub fn todo_write() -> RegisteredTool {
    let definition = ToolDefinition {
        name: TODO_WRITE.to_string(),
        description: DESCRIPTION.to_string(),
        parameters: tool_schema!({
            "type": "object",
            "properties": {
                "todos": {
                    "type": "array",
                    "description": "Every step, in order.",
                    "items": {
                        "type": "object",
                        "properties": {
                            "content": {"type": "string", "description": "The step, as an instruction."},
                            "status": {"type": "string", "enum": ["pending", "in_progress", "completed"]},
                            "activeForm": {"type": "string", "description": "The step as it is being done (\"Running the tests\")."}
                        },
                        "required": ["content", "status"],
                        "additionalProperties": false
                    }
                }
            },
            "required": ["todos"],
            "additionalProperties": false
        }),
        freeform: None,
    };
    RegisteredTool::new(definition, execute)
}

/// gemini-cli's shape: `{"todos": [{"description", "status"}]}`, `cancelled` allowed.
pub fn write_todos() -> RegisteredTool {
    let definition = ToolDefinition {
        name: WRITE_TODOS.to_string(),
        description: DESCRIPTION.to_string(),
        parameters: tool_schema!({
            "type": "object",
            "properties": {
                "todos": {
                    "type": "array",
                    "description": "Every step, in order.",
                    "items": {
                        "type": "object",
                        "properties": {
                            "description": {"type": "string"},
                            "status": {"type": "string", "enum": ["pending", "in_progress", "completed", "cancelled"]}
                        },
                        "required": ["description", "status"],
                        "additionalProperties": false
                    }
                }
            },
            "required": ["todos"],
            "additionalProperties": false
        }),
        freeform: None,
    };
    RegisteredTool::new(definition, execute)
}

fn execute(input: ToolInput, _ctx: &ToolContext<'_>) -> Result<ToolOutput, String> {
    let args = args::json(&input)?;
    let (list, text_key) = list_and_key(args).ok_or("the plan has no list of steps")?;
    let entries = parse_entries(list, text_key)?;
    let count = |status| entries.iter().filter(|e| e.status == status).count();
    if count(PlanStatus::InProgress) > 1 {
        return Err("more than one step is in_progress; mark one step at a time".to_string());
    }
    Ok(ToolOutput::text(format!(
        "Plan updated: {} steps ({} completed, {} in progress, {} pending).",
        entries.len(),
        count(PlanStatus::Completed),
        count(PlanStatus::InProgress),
        count(PlanStatus::Pending)
    )))
}

/// The list and the name of its text field in each shape.
fn list_and_key(args: &serde_json::Map<String, Value>) -> Option<(&Vec<Value>, &'static str)> {
    if let Some(Value::Array(plan)) = args.get("plan") {
        return Some((plan, "step"));
    }
    let Some(Value::Array(todos)) = args.get("todos") else {
        return None;
    };
    let gemini = todos.iter().any(|t| t.get("description").is_some());
    Some((todos, if gemini { "description" } else { "content" }))
}

fn parse_entries(list: &[Value], text_key: &str) -> Result<Vec<PlanEntry>, String> {
    list.iter()
        .enumerate()
        .map(|(i, item)| {
            let content = item.get(text_key).and_then(Value::as_str);
            let status = item.get("status").and_then(Value::as_str);
            match (content, status.and_then(PlanStatus::parse)) {
                (Some(content), Some(status)) if !content.trim().is_empty() => Ok(PlanEntry {
                    content: content.to_string(),
                    status,
                }),
                _ => Err(format!(
                    "step {} needs a non-empty `{text_key}` and a status (pending, \
                     in_progress or completed)",
                    i + 1
                )),
            }
        })
        .collect()
}

/// The plan a successful call of a plan tool set, with Codex's `explanation` when given;
/// `None` for any other tool.
pub(crate) fn plan_of(tool: &str, arguments: &Value) -> Option<(Vec<PlanEntry>, Option<String>)> {
    if ![UPDATE_PLAN, TODO_WRITE, WRITE_TODOS].contains(&tool) {
        return None;
    }
    let parsed;
    let args = match arguments {
        Value::Object(map) => map,
        Value::String(raw) => {
            parsed = serde_json::from_str::<serde_json::Map<String, Value>>(raw).ok()?;
            &parsed
        }
        _ => return None,
    };
    let (list, key) = list_and_key(args)?;
    let entries = parse_entries(list, key).ok()?;
    let explanation = args
        .get("explanation")
        .and_then(Value::as_str)
        .map(str::to_string);
    Some((entries, explanation))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_shape_gives_the_same_plan() {
        let codex = json!({"plan": [{"step": "read", "status": "completed"},
                                     {"step": "fix", "status": "in_progress"}],
                           "explanation": "found it"});
        let claude = json!({"todos": [{"content": "read", "status": "completed", "activeForm": "Reading"},
                                      {"content": "fix", "status": "in_progress"}]});
        let gemini = json!({"todos": [{"description": "read", "status": "completed"},
                                      {"description": "fix", "status": "in_progress"}]});
        let want = vec![
            PlanEntry {
                content: "read".into(),
                status: PlanStatus::Completed,
            },
            PlanEntry {
                content: "fix".into(),
                status: PlanStatus::InProgress,
            },
        ];
        let (entries, why) = plan_of(UPDATE_PLAN, &codex).unwrap();
        assert_eq!((entries, why.as_deref()), (want.clone(), Some("found it")));
        assert_eq!(plan_of(TODO_WRITE, &claude).unwrap().0, want);
        assert_eq!(plan_of(WRITE_TODOS, &gemini).unwrap().0, want);
        assert!(plan_of("shell", &codex).is_none());
    }

    #[test]
    fn a_bad_step_is_refused_with_its_number() {
        let args = json!({"todos": [{"content": "x", "status": "done"}]});
        let Value::Object(map) = args else {
            unreachable!()
        };
        let (list, key) = list_and_key(&map).unwrap();
        let err = parse_entries(list, key).unwrap_err();
        assert!(err.contains("step 1"), "{err}");
    }
}
