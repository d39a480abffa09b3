//! The offline demo of the `agentloop` CLI: a scripted model that does a small real task —
//! write a bash script, run it, edit it, run it again — through the real tools, in a fresh
//! temporary directory.
//!
//! The script is dynamic: each answer is chosen by reading the request, so every step
//! follows the actual tool results (the output the script printed, an error if a step
//! failed). It adapts to the profile's tools (`write_file`/`edit_file`, or `apply_patch`
//! for the OpenAI profile). It never touches the network.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use agentloop::llm::scripted::{ScriptedModel, ScriptedTurn};
use agentloop::llm::{ContentPart, Request};
use serde_json::json;

/// The task the demo submits.
pub const TASK: &str = "Write a bash script greet.sh that greets the name it is given, run it, \
then make it say goodbye as well and run it again.";

/// The first line of the demo's output.
pub const BANNER: &str = "agentloop offline demo: no API key found, so a scripted model drives \
the real tools. For a real model set ANTHROPIC_API_KEY, OPENAI_API_KEY or GEMINI_API_KEY \
(or pass --provider).";

const SCRIPT: &str = "#!/usr/bin/env bash\nname=\"${1:-world}\"\necho \"hello, $name\"\n";
const GREETING: &str = "echo \"hello, $name\"";
const RUN: &str = "bash greet.sh agentloop";

/// The demo's model and whether it saw the task through to the expected output.
pub struct Demo {
    /// The scripted model (provider id `scripted`).
    pub model: ScriptedModel,
    finished: Arc<AtomicBool>,
}

impl Demo {
    /// A fresh demo.
    pub fn new() -> Demo {
        let finished = Arc::new(AtomicBool::new(false));
        let seen = finished.clone();
        let model = ScriptedModel::dynamic(move |request| next_turn(request, &seen));
        Demo { model, finished }
    }

    /// Whether the last run printed both the greeting and the goodbye.
    pub fn succeeded(&self) -> bool {
        self.finished.load(Ordering::SeqCst)
    }
}

/// What the last tool result said, and how many tool results the conversation has.
fn last_result(request: &Request) -> (usize, Option<(String, bool)>) {
    let mut count = 0;
    let mut last = None;
    for part in request.messages.iter().flat_map(|m| &m.content) {
        if let ContentPart::ToolResult(result) = part {
            count += 1;
            last = Some((result.content.clone(), result.is_error));
        }
    }
    (count, last)
}

fn has_tool(request: &Request, name: &str) -> bool {
    request.tools.iter().any(|t| t.name == name)
}

/// The text between `<stdout>` and `</stdout>` of a shell result.
fn stdout_of(result: &str) -> &str {
    result
        .split_once("<stdout>\n")
        .and_then(|(_, rest)| rest.split_once("</stdout>"))
        .map_or("", |(out, _)| out)
}

fn next_turn(request: &Request, finished: &AtomicBool) -> ScriptedTurn {
    let (step, last) = last_result(request);
    if let Some((text, true)) = &last {
        let first_line = text.lines().next().unwrap_or("");
        return ScriptedTurn::text(format!(
            "Step {step} failed, so I stopped here: {first_line}"
        ));
    }
    let output = last.as_ref().map_or("", |(text, _)| stdout_of(text));
    match step {
        0 => {
            let intro = "I'll write the script first.";
            if has_tool(request, "write_file") {
                ScriptedTurn::text(intro).with_tool_call(
                    "write_file",
                    json!({"file_path": "greet.sh", "content": SCRIPT}),
                )
            } else {
                let added: String = SCRIPT.lines().map(|l| format!("+{l}\n")).collect();
                let patch =
                    format!("*** Begin Patch\n*** Add File: greet.sh\n{added}*** End Patch");
                ScriptedTurn::text(intro).with_tool_call("apply_patch", json!({"patch": patch}))
            }
        }
        1 => ScriptedTurn::text("Now let me run it.").with_tool_call(
            "shell",
            json!({"command": RUN, "description": "run the script"}),
        ),
        2 => {
            let said = output.trim();
            let intro = format!("It printed `{said}`. Next, it should say goodbye too.");
            let goodbye = format!("{GREETING}\necho \"goodbye, $name\"");
            if has_tool(request, "edit_file") {
                ScriptedTurn::text(intro).with_tool_call(
                    "edit_file",
                    json!({"file_path": "greet.sh", "old_string": GREETING, "new_string": goodbye}),
                )
            } else {
                let patch = format!(
                    "*** Begin Patch\n*** Update File: greet.sh\n@@\n {GREETING}\n+echo \"goodbye, \
                     $name\"\n*** End Patch"
                );
                ScriptedTurn::text(intro).with_tool_call("apply_patch", json!({"patch": patch}))
            }
        }
        3 => ScriptedTurn::text("Let me run it again.").with_tool_call(
            "shell",
            json!({"command": RUN, "description": "run the script"}),
        ),
        _ => {
            let lines: Vec<&str> = output.lines().collect();
            let ok = lines.first() == Some(&"hello, agentloop")
                && lines.get(1) == Some(&"goodbye, agentloop");
            finished.store(ok, Ordering::SeqCst);
            if ok {
                ScriptedTurn::text(format!(
                    "Done. `greet.sh` now greets and says goodbye:\n\n    {}\n",
                    lines.join("\n    ")
                ))
            } else {
                ScriptedTurn::text(format!(
                    "The script ran, but its output was not what I expected:\n{output}"
                ))
            }
        }
    }
}
