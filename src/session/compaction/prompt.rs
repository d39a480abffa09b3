//! The compaction request's instructions and the preamble of a summary turn (our words).
//!
//! Text only; nothing here sends or plans anything.

/// The system instructions of a compaction request.
pub(crate) const SUMMARY_PROMPT: &str = "\
You are writing the handoff summary of a coding agent's session. The conversation below no \
longer fits the model's context window: your summary replaces it, and the agent will \
continue from the summary alone, with the user's messages and its most recent turns kept \
beside it. Do not call tools. Do not continue the task. Write only the summary.

Write these sections, in this order, with these headings, and leave none out (write \
\"none\" under a heading with nothing to say):

## Goal
What the user wants overall, in one or two sentences.

## Constraints and preferences
Every rule, constraint and preference the user or the project stated, in their own words \
where you can. Keep all of them: a rule lost here is a rule broken later.

## User requests
Every request the user made, oldest first, each marked done, in progress or not started.

## Files
Files read, and files created or modified with what changed.

## Actions completed
Every tool call that already ran, with its arguments in short and its outcome (succeeded, \
failed and why, what it showed). These are done: the agent must not repeat them. Carry over \
the actions listed in the previous summary.

## Current step
What the agent was doing when the conversation was cut.

## Next step
What the agent should do next.

## Open questions
Anything unresolved, unexpected or waiting for the user.

If a previous summary is given, update it: keep what still holds, add what happened since, \
and drop nothing that is still true. Be concise; prefer lists to prose.";

/// The first line of every summary turn: what the model is told plainly.
pub(crate) const SUMMARY_PREAMBLE: &str = "\
[Context compaction] Earlier turns of this conversation were replaced by the summary \
below because the context window filled up. User messages shown before this one are \
verbatim. Actions listed as completed were already done: do not repeat them; if in doubt, \
check their result instead.";

/// The heading of the previous summary in the compaction request's input.
pub(crate) const PREVIOUS_SUMMARY_HEADING: &str = "# Previous summary (update it)";
/// The heading of the conversation in the compaction request's input.
pub(crate) const CONVERSATION_HEADING: &str = "# Conversation to summarise (oldest first)";
/// The heading of the completed actions in the compaction request's input.
pub(crate) const ACTIONS_HEADING: &str =
    "# Completed actions (tool calls that already ran, with their outcome)";

/// The summary turn's text for `summary`.
pub(crate) fn summary_content(summary: &str) -> String {
    format!("{SUMMARY_PREAMBLE}\n\n{}", summary.trim())
}

/// The summary inside a summary turn's text (the text itself if it has no preamble).
pub(crate) fn summary_of(content: &str) -> &str {
    content
        .strip_prefix(SUMMARY_PREAMBLE)
        .map_or(content, str::trim_start)
}
