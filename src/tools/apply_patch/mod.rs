//! The `apply_patch` tool: v4a patches (the format OpenAI's models are trained on), applied
//! all or nothing. It reads and writes files only through the [`ExecutionEnvironment`]
//! and never leaves a patch half applied when a hunk fails.
//!
//! The executor parses the patch ([`parse_patch`]), then plans every operation in memory,
//! reading each file through the environment and applying its hunks ([`apply_hunks`]).
//! Only when every operation has succeeded does it write: first the new and changed files,
//! then the deletions. If a write fails part-way, the files already written are restored
//! from the contents read during planning.
//!
//! [`ExecutionEnvironment`]: crate::exec::ExecutionEnvironment

use crate::llm::tool_schema::tool_schema;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::{
    FreeformFormat, RegisteredTool, ToolContext, ToolDefinition, ToolInput, ToolOutput, args,
};

mod apply;
mod parse;

pub use apply::{Applied, apply_hunks};
pub use parse::{Hunk, HunkLine, Operation, Patch, parse_patch};

/// The tool's name.
pub const NAME: &str = "apply_patch";

/// What the model reads about the tool.
pub const DESCRIPTION: &str = "\
Create, change, move and delete files by applying a patch. The patch is plain text: file \
operations between a `*** Begin Patch` line and an `*** End Patch` line.

- `*** Add File: <path>` then the new file's lines, each starting with `+`.
- `*** Delete File: <path>` removes a file.
- `*** Update File: <path>` changes a file in place. An optional `*** Move to: <new path>` \
line right after it renames the file. Then come one or more hunks. A hunk starts with `@@`, \
optionally followed by a line of the file that comes before the change (for example the \
signature of the enclosing function), then the change itself, one line per file line: ` ` \
(a space) for an unchanged context line, `-` for a line to remove, `+` for a line to add. \
Show about three unchanged lines above and below each change so that its place is \
unambiguous; repeat `@@` hints (class, then method) when the same lines occur more than \
once. Put `*** End of File` after a hunk that reaches the end of the file.

Paths are relative to the working directory. Context and removed lines must match the file \
(read it first). The patch is applied completely or not at all: if any part fails, no file \
changes and the error says which hunk did not match.

Example:
*** Begin Patch
*** Update File: src/app.py
@@ def main():
     args = parse()
-    run(args)
+    run(args, verbose=True)
     return 0
*** Add File: NOTES.md
+Remember to update the docs.
*** End Patch";

/// The Lark grammar of the patch text, for providers that constrain a freeform (custom)
/// tool's input with a grammar.
pub const GRAMMAR: &str = r#"start: begin_marker operation+ end_marker

begin_marker: "*** Begin Patch" LF
end_marker: "*** End Patch" LF?

operation: add_file | delete_file | update_file

add_file: "*** Add File: " PATH LF new_line*
new_line: "+" TEXT? LF

delete_file: "*** Delete File: " PATH LF

update_file: "*** Update File: " PATH LF rename? first_hunk next_hunk*
rename: "*** Move to: " PATH LF
first_hunk: hint_line* change+ eof_mark?
next_hunk: hint_line+ change+ eof_mark?
hint_line: "@@" HINT? LF
change: CHANGE LF
eof_mark: "*** End of File" LF

PATH: /[^\n]+/
TEXT: /[^\n]+/
HINT: / [^\n]+/
CHANGE: /[ +\-][^\n]*/

%import common.LF
"#;

/// The tool's definition: a function with one string parameter `patch`, which providers
/// with freeform tools may offer as a custom tool constrained by [`GRAMMAR`].
pub fn definition() -> ToolDefinition {
    ToolDefinition {
        name: NAME.to_string(),
        description: DESCRIPTION.to_string(),
        parameters: tool_schema!({
            "type": "object",
            "properties": {
                "patch": {
                    "type": "string",
                    "description": "The whole patch, from `*** Begin Patch` to `*** End Patch`."
                }
            },
            "required": ["patch"],
            "additionalProperties": false
        }),
        freeform: Some(FreeformFormat {
            syntax: "lark".to_string(),
            definition: GRAMMAR.to_string(),
        }),
    }
}

/// The `apply_patch` tool.
pub fn tool() -> RegisteredTool {
    RegisteredTool::new(definition(), execute).doing_bounded_file_io()
}

fn execute(input: ToolInput, ctx: &ToolContext<'_>) -> Result<ToolOutput, String> {
    let text = match &input {
        ToolInput::Freeform(raw) => raw.as_str(),
        ToolInput::Json(map) => args::required_str(map, "patch")?,
    };
    let patch =
        parse_patch(text).map_err(|e| format!("invalid patch, no file was changed: {e}"))?;
    let plan =
        plan(&patch, ctx).map_err(|e| format!("patch rejected, no file was changed: {e}"))?;
    commit(&plan, ctx)?;
    let mut out = String::from("Success. Updated the following files:\n");
    for line in &plan.summary {
        out.push_str(line);
        out.push('\n');
    }
    for note in &plan.notes {
        let _ = writeln!(out, "Note: {note}.");
    }
    Ok(ToolOutput::text(out.trim_end().to_string()))
}

/// The state of a path after the operations planned so far.
#[derive(Debug, Clone)]
enum Planned {
    Write(String),
    Delete,
}

/// Every change of a patch, computed in memory and not yet written.
struct Plan {
    /// Final state per path, in path order.
    changes: BTreeMap<PathBuf, Planned>,
    /// The content of each touched path before the patch (`None`: it did not exist).
    originals: BTreeMap<PathBuf, Option<Vec<u8>>>,
    /// `A path`, `M path`, `M old -> new`, `D path`, in patch order.
    summary: Vec<String>,
    /// Notes on hunks that matched loosely.
    notes: Vec<String>,
}

impl Plan {
    /// The current text of `path`: planned, or read from the environment. `None` when it
    /// does not exist. Remembers what was read as the original.
    fn current(
        &mut self,
        ctx: &ToolContext<'_>,
        path: &PathBuf,
        shown: &str,
    ) -> Result<Option<String>, String> {
        if let Some(planned) = self.changes.get(path) {
            return Ok(match planned {
                Planned::Write(content) => Some(content.clone()),
                Planned::Delete => None,
            });
        }
        let original = read_original(ctx, path, shown)?;
        let text = match &original {
            Some(bytes) => Some(String::from_utf8(bytes.clone()).map_err(|_| {
                format!("{shown} is not UTF-8 text; apply_patch edits text files only")
            })?),
            None => None,
        };
        self.originals.insert(path.clone(), original);
        Ok(text)
    }

    /// Remembers the original of `path` before it is overwritten without being read.
    fn remember(
        &mut self,
        ctx: &ToolContext<'_>,
        path: &PathBuf,
        shown: &str,
    ) -> Result<(), String> {
        if !self.originals.contains_key(path) && !self.changes.contains_key(path) {
            let original = read_original(ctx, path, shown)?;
            self.originals.insert(path.clone(), original);
        }
        Ok(())
    }
}

/// The bytes of `path`, `None` if nothing is there; an error for a directory.
fn read_original(
    ctx: &ToolContext<'_>,
    path: &Path,
    shown: &str,
) -> Result<Option<Vec<u8>>, String> {
    args::read_existing(
        ctx,
        path,
        shown,
        "apply_patch adds, updates and deletes files only",
    )
}

fn plan(patch: &Patch, ctx: &ToolContext<'_>) -> Result<Plan, String> {
    let mut plan = Plan {
        changes: BTreeMap::new(),
        originals: BTreeMap::new(),
        summary: Vec::new(),
        notes: Vec::new(),
    };
    for operation in &patch.operations {
        match operation {
            Operation::Add { path, content } => {
                let full = args::resolve_path(ctx, path)?;
                plan.remember(ctx, &full, path)?;
                plan.changes.insert(full, Planned::Write(content.clone()));
                plan.summary.push(format!("A {path}"));
            }
            Operation::Delete { path } => {
                let full = args::resolve_path(ctx, path)?;
                if plan.current(ctx, &full, path)?.is_none() {
                    return Err(format!(
                        "`*** Delete File: {path}`: the file does not exist; check the path, or \
                         leave this operation out"
                    ));
                }
                plan.changes.insert(full, Planned::Delete);
                plan.summary.push(format!("D {path}"));
            }
            Operation::Update {
                path,
                move_to,
                hunks,
            } => {
                let full = args::resolve_path(ctx, path)?;
                let Some(content) = plan.current(ctx, &full, path)? else {
                    return Err(format!(
                        "`*** Update File: {path}`: the file does not exist; check the path, or \
                         create the file with `*** Add File: {path}`"
                    ));
                };
                let applied = apply_hunks(path, &content, hunks)?;
                plan.notes.extend(applied.notes);
                match move_to {
                    Some(target) => {
                        let target_full = args::resolve_path(ctx, target)?;
                        plan.remember(ctx, &target_full, target)?;
                        if target_full != full {
                            plan.changes.insert(full, Planned::Delete);
                        }
                        plan.changes
                            .insert(target_full, Planned::Write(applied.content));
                        plan.summary.push(format!("M {path} -> {target}"));
                    }
                    None => {
                        plan.changes.insert(full, Planned::Write(applied.content));
                        plan.summary.push(format!("M {path}"));
                    }
                }
            }
        }
    }
    Ok(plan)
}

/// Writes the plan: new and changed files first, then deletions. On a failure, restores
/// what was already changed.
fn commit(plan: &Plan, ctx: &ToolContext<'_>) -> Result<(), String> {
    let original = |path: &PathBuf| plan.originals.get(path).cloned().flatten();
    let writes = plan
        .changes
        .iter()
        .filter_map(|(path, planned)| match planned {
            Planned::Write(content) => Some((path, content)),
            Planned::Delete => None,
        });
    let deletes = plan
        .changes
        .iter()
        .filter(|(_, planned)| matches!(planned, Planned::Delete))
        .map(|(path, _)| path);
    let mut done: Vec<&PathBuf> = Vec::new();
    let mut failure = None;
    for (path, content) in writes {
        if original(path).as_deref() == Some(content.as_bytes()) {
            continue;
        }
        match ctx.env.write_file(path, content.as_bytes()) {
            Ok(()) => done.push(path),
            Err(e) => {
                failure = Some(format!(
                    "writing {} failed: {e}",
                    args::display_path(ctx, path)
                ));
                break;
            }
        }
    }
    if failure.is_none() {
        for path in deletes {
            if original(path).is_none() {
                // Created and removed within the patch: nothing on disk.
                continue;
            }
            match ctx.env.remove_file(path) {
                Ok(()) => done.push(path),
                Err(e) => {
                    failure = Some(format!(
                        "deleting {} failed: {e}",
                        args::display_path(ctx, path)
                    ));
                    break;
                }
            }
        }
    }
    let Some(failure) = failure else {
        return Ok(());
    };
    let mut not_restored = Vec::new();
    for path in done.into_iter().rev() {
        let restored = match original(path) {
            Some(bytes) => ctx.env.write_file(path, &bytes),
            None => ctx.env.remove_file(path),
        };
        if restored.is_err() {
            not_restored.push(args::display_path(ctx, path));
        }
    }
    if not_restored.is_empty() {
        Err(format!(
            "{failure}; the files already written were restored, so no file was changed"
        ))
    } else {
        Err(format!(
            "{failure}; restoring the files already written failed for: {}. Check them before \
             retrying",
            not_restored.join(", ")
        ))
    }
}
