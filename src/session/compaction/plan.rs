//! The compaction plan: where the cut falls, which user messages stay verbatim, and the
//! compaction request's input, cut to fit the window (tool outputs middle-out, then the
//! oldest turns dropped with a marker).
//!
//! Pure computation over the turns: no I/O, no model call (what the bench's "plan"
//! figure measures).

use std::collections::HashMap;
use std::fmt::Write as _;

use super::CompactionFallback;
use super::account::{BYTES_PER_TOKEN, CompactionLimits, estimate_turn_tokens};
use super::prompt::{ACTIONS_HEADING, CONVERSATION_HEADING, PREVIOUS_SUMMARY_HEADING, summary_of};
use crate::session::history::{SummaryTurn, Turn};

/// Tool outputs are never cut below this many bytes before turns are dropped.
const MIN_OUTPUT_BYTES: usize = 256;
/// Tool arguments are shown up to this many bytes (middle-out beyond).
const MAX_ARGUMENT_BYTES: usize = 400;
/// Outcome excerpts in the completed-actions list.
const MAX_OUTCOME_BYTES: usize = 160;
/// Lines of the mechanical record of actions.
const MAX_RECORD_LINE_BYTES: usize = 160;
/// Tokens kept free in the compaction request besides the summary's output limit.
const REQUEST_MARGIN: usize = 512;
/// Loop-detection warnings are the library's, not the user's: summarised, not kept.
const LOOP_WARNING_PREFIX: &str = "Loop detected:";

/// What a compaction of a history would do, computed without calling the model.
///
/// ```
/// use agentloop::llm::{ToolCall, ToolResult};
/// use agentloop::session::Turn;
/// use agentloop::unstable::{CompactionLimits, CompactionPlan};
/// use agentloop::serde_json::json;
///
/// let mut turns = vec![Turn::user("list the files, forty times")];
/// for i in 0..40 {
///     let call = ToolCall::new(format!("call_{i}"), "shell", json!({"command": "ls"}));
///     let assistant = json!({"type": "assistant", "content": "", "tool_calls": [call],
///                            "timestamp": "2026-01-01T00:00:00.000Z"});
///     turns.push(agentloop::serde_json::from_value(assistant).unwrap());
///     turns.push(Turn::tool_results(vec![ToolResult::for_call(&call, "x".repeat(400), false)]));
/// }
/// let plan = CompactionPlan::new(&turns, &CompactionLimits::for_window(4_000), 0).unwrap();
/// assert!(plan.turns_summarised() > 0);
/// assert!(plan.input().contains("# Completed actions"));
/// ```
#[derive(Debug, Clone)]
pub struct CompactionPlan {
    /// Indices of user and steering turns before the cut that stay verbatim.
    kept_users: Vec<usize>,
    /// First index of the recent turns kept verbatim.
    cut: usize,
    /// The compaction request's user input.
    input: String,
    fallback: CompactionFallback,
    turns_summarised: usize,
    /// Turns the previous summary had replaced.
    prior_summarised: usize,
    /// Estimated tokens of what the summary replaces (previous summary included).
    replaced_tokens: usize,
    previous_summary: Option<String>,
    /// One line per completed tool call of the summarised part, oldest first.
    actions: Vec<String>,
}

/// One summarised turn rendered for the compaction request.
struct Piece {
    text: String,
    /// A tool output that may be cut middle-out (placed after `text`).
    output: Option<String>,
    actions: Vec<String>,
}

impl CompactionPlan {
    /// Plans a compaction of `turns` under `limits`; `prompt_tokens` is the estimate of the
    /// compaction request's instructions. `None` when nothing before the recent turns can
    /// be summarised (user messages alone are never summarised).
    pub fn new(
        turns: &[Turn],
        limits: &CompactionLimits,
        prompt_tokens: usize,
    ) -> Option<CompactionPlan> {
        let cut = cut_point(turns, limits.recent);
        let kept_users = kept_users(&turns[..cut], limits.users);
        let mut previous_summary = None;
        let mut prior_summarised = 0;
        let mut replaced_tokens = 0;
        let mut turns_summarised = 0;
        let mut work = false;
        let mut names: HashMap<&str, (&str, String)> = HashMap::new();
        let mut pieces = Vec::new();
        for (index, turn) in turns[..cut].iter().enumerate() {
            if kept_users.contains(&index) {
                continue;
            }
            replaced_tokens += estimate_turn_tokens(turn);
            if let Turn::Summary(summary) = turn {
                previous_summary = Some(summary_of(&summary.content).to_string());
                prior_summarised += summary.turns_summarised;
                continue;
            }
            turns_summarised += 1;
            work |= matches!(
                turn,
                Turn::Assistant(_) | Turn::ToolResults(_) | Turn::System(_)
            );
            render(turn, &mut names, &mut pieces);
        }
        // Summarising only the user's own messages would restate them, less faithfully.
        if !work {
            return None;
        }
        let budget = limits
            .window
            .saturating_sub(limits.summary_output + prompt_tokens + REQUEST_MARGIN)
            .saturating_mul(BYTES_PER_TOKEN);
        let (input, actions, fallback) = assemble(pieces, previous_summary.as_deref(), budget);
        Some(CompactionPlan {
            kept_users,
            cut,
            input,
            fallback,
            turns_summarised,
            prior_summarised,
            replaced_tokens,
            previous_summary,
            actions,
        })
    }

    /// The compaction request's user input.
    pub fn input(&self) -> &str {
        &self.input
    }

    /// Turns the summary replaces (not counting the ones a previous summary replaced).
    pub fn turns_summarised(&self) -> usize {
        self.turns_summarised
    }

    /// What had to be cut to fit the compaction request.
    pub fn fallback(&self) -> CompactionFallback {
        self.fallback
    }

    /// Estimated tokens of what the summary replaces.
    pub fn replaced_tokens(&self) -> usize {
        self.replaced_tokens
    }

    /// The first turn kept verbatim after the summary.
    pub fn cut(&self) -> usize {
        self.cut
    }

    /// The history after the compaction: kept user messages, the summary turn with
    /// `content`, the recent turns.
    pub(crate) fn compacted(&self, turns: &[Turn], content: String) -> Vec<Turn> {
        let mut out = Vec::with_capacity(self.kept_users.len() + 1 + turns.len() - self.cut);
        out.extend(self.kept_users.iter().map(|&i| turns[i].clone()));
        out.push(Turn::Summary(SummaryTurn {
            content,
            turns_summarised: self.prior_summarised + self.turns_summarised,
            timestamp: std::time::SystemTime::now(),
        }));
        out.extend_from_slice(&turns[self.cut..]);
        out
    }

    /// The summary used when the model's is rejected or cannot be made: the previous
    /// summary and the newest completed actions, within `max_tokens`.
    pub(crate) fn mechanical_summary(&self, why: &str, max_tokens: usize) -> String {
        // Never larger than half of what it replaces: the record must shrink the history.
        let budget = max_tokens.min(self.replaced_tokens / 2) * BYTES_PER_TOKEN;
        let mut out = format!(
            "No model-written summary is available for {} earlier turns ({why}); they were \
             dropped. What is known:\n",
            self.turns_summarised
        );
        if let Some(previous) = &self.previous_summary {
            if out.len() + previous.len() < budget / 2 {
                out.push_str("\n## Earlier summary\n");
                out.push_str(previous);
                out.push('\n');
            }
        }
        out.push_str("\n## Actions completed (do not repeat)\n");
        let room = budget.saturating_sub(out.len());
        let mut kept = Vec::new();
        let mut used = 0;
        for line in self.actions.iter().rev() {
            let line = middle_out(line, MAX_RECORD_LINE_BYTES);
            if used + line.len() + 1 > room {
                break;
            }
            used += line.len() + 1;
            kept.push(line);
        }
        if kept.len() < self.actions.len() {
            let _ = writeln!(
                out,
                "- ({} older actions not listed)",
                self.actions.len() - kept.len()
            );
        }
        for line in kept.iter().rev() {
            out.push_str(line);
            out.push('\n');
        }
        out
    }
}

/// The first index of the recent turns: as many newest turns as fit `budget` tokens,
/// moved forward past tool results so a call is never separated from its results.
fn cut_point(turns: &[Turn], budget: usize) -> usize {
    let mut used = 0;
    let mut cut = turns.len();
    while cut > 0 {
        let cost = estimate_turn_tokens(&turns[cut - 1]);
        if used + cost > budget {
            break;
        }
        used += cost;
        cut -= 1;
    }
    while cut < turns.len() && matches!(turns[cut], Turn::ToolResults(_)) {
        cut += 1;
    }
    cut
}

/// User and steering turns kept verbatim: the newest first while they fit `budget`; the
/// oldest beyond it are summarised.
fn kept_users(turns: &[Turn], budget: usize) -> Vec<usize> {
    let mut kept = Vec::new();
    let mut used = 0;
    for (index, turn) in turns.iter().enumerate().rev() {
        let is_user = match turn {
            Turn::User(_) => true,
            Turn::Steering(s) => !s.content.starts_with(LOOP_WARNING_PREFIX),
            _ => false,
        };
        if !is_user {
            continue;
        }
        let cost = estimate_turn_tokens(turn);
        if used + cost > budget {
            break;
        }
        used += cost;
        kept.push(index);
    }
    kept.reverse();
    kept
}

/// Renders one turn as text pieces (a tool-results turn gives one piece per result).
fn render<'a>(
    turn: &'a Turn,
    names: &mut HashMap<&'a str, (&'a str, String)>,
    pieces: &mut Vec<Piece>,
) {
    let text = |text: String| Piece {
        text,
        output: None,
        actions: Vec::new(),
    };
    match turn {
        Turn::User(t) => pieces.push(text(format!("## user\n{}\n", t.content))),
        Turn::Steering(t) => pieces.push(text(format!(
            "## user (sent while the agent worked)\n{}\n",
            t.content
        ))),
        Turn::System(t) => pieces.push(text(format!("## system\n{}\n", t.content))),
        Turn::Summary(t) => pieces.push(text(format!("## earlier summary\n{}\n", t.content))),
        Turn::Assistant(t) => {
            let mut out = String::from("## assistant\n");
            if !t.content.is_empty() {
                out.push_str(&t.content);
                out.push('\n');
            }
            for call in &t.tool_calls {
                let arguments = middle_out(&call.arguments.to_string(), MAX_ARGUMENT_BYTES);
                let _ = writeln!(out, "-> calls `{}` {arguments}", call.name);
                names.insert(&call.id, (&call.name, arguments));
            }
            pieces.push(text(out));
        }
        Turn::ToolResults(t) => {
            for result in &t.results {
                let (name, arguments) = names
                    .get(result.tool_call_id.as_str())
                    .cloned()
                    .unwrap_or((result.name.as_deref().unwrap_or("tool"), String::new()));
                let outcome = if result.is_error {
                    "failed"
                } else {
                    "succeeded"
                };
                let first = result
                    .content
                    .lines()
                    .find(|l| !l.trim().is_empty())
                    .unwrap_or("");
                pieces.push(Piece {
                    text: format!("## result of `{name}` ({outcome})\n"),
                    output: Some(result.content.clone()),
                    actions: vec![format!(
                        "- `{name}` {arguments} -> {outcome}: {}",
                        middle_out(first.trim(), MAX_OUTCOME_BYTES)
                    )],
                });
            }
        }
    }
}

/// Joins the pieces into the request input within `budget` bytes: tool outputs cut
/// middle-out to one common cap first, then the oldest pieces dropped with a marker.
fn assemble(
    mut pieces: Vec<Piece>,
    previous: Option<&str>,
    budget: usize,
) -> (String, Vec<String>, CompactionFallback) {
    let mut fixed = 256 + previous.map_or(0, str::len);
    for piece in &pieces {
        fixed += piece.text.len() + piece.actions.iter().map(|a| a.len() + 1).sum::<usize>() + 1;
    }
    let outputs = |pieces: &[Piece], cap: usize| -> usize {
        pieces
            .iter()
            .filter_map(|p| p.output.as_ref())
            .map(|o| o.len().min(cap))
            .sum()
    };
    let mut fallback = CompactionFallback::None;
    let mut cap = usize::MAX;
    if fixed + outputs(&pieces, cap) > budget {
        fallback = CompactionFallback::Truncated;
        // The largest cap that fits, found by halving the interval.
        let (mut low, mut high) = (
            MIN_OUTPUT_BYTES,
            pieces
                .iter()
                .filter_map(|p| p.output.as_ref())
                .map(String::len)
                .max()
                .unwrap_or(0),
        );
        while low < high {
            let mid = low + (high - low).div_ceil(2);
            if fixed + outputs(&pieces, mid) <= budget {
                low = mid;
            } else {
                high = mid - 1;
            }
        }
        cap = low;
    }
    let mut dropped = 0;
    let mut total = fixed + outputs(&pieces, cap);
    let mut start = 0;
    while total > budget && start < pieces.len() {
        let piece = &pieces[start];
        total -= piece.text.len()
            + piece.actions.iter().map(|a| a.len() + 1).sum::<usize>()
            + 1
            + piece.output.as_ref().map_or(0, |o| o.len().min(cap));
        start += 1;
        dropped += 1;
    }
    if dropped > 0 {
        fallback = CompactionFallback::Dropped;
    }
    let pieces = pieces.split_off(start);
    let mut input = String::with_capacity(total.min(budget) + 256);
    if let Some(previous) = previous {
        let _ = write!(input, "{PREVIOUS_SUMMARY_HEADING}\n\n{previous}\n\n");
    }
    let _ = write!(input, "{CONVERSATION_HEADING}\n\n");
    if dropped > 0 {
        let _ = write!(
            input,
            "[{dropped} older parts of the conversation did not fit this request and were \
             left out; their content is lost. Say so under Open questions.]\n\n"
        );
    }
    let mut actions = Vec::new();
    for piece in &pieces {
        input.push_str(&piece.text);
        if let Some(output) = &piece.output {
            input.push_str(&middle_out(output, cap));
            input.push('\n');
        }
        input.push('\n');
        actions.extend(piece.actions.iter().cloned());
    }
    let _ = write!(input, "{ACTIONS_HEADING}\n\n");
    if actions.is_empty() {
        input.push_str("none\n");
    }
    for action in &actions {
        input.push_str(action);
        input.push('\n');
    }
    (input, actions, fallback)
}

/// `text` within `max` bytes: its head and tail with a marker of what was cut between.
pub(crate) fn middle_out(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let marker_room = 48;
    let keep = max.saturating_sub(marker_room) / 2;
    let mut head = keep;
    while !text.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = text.len() - keep;
    while !text.is_char_boundary(tail) {
        tail += 1;
    }
    format!(
        "{}\n[... {} bytes cut from the middle ...]\n{}",
        &text[..head],
        tail - head,
        &text[tail..]
    )
}

/// Cuts tool outputs of `turns` middle-out until their estimate shrank by `excess`
/// tokens (largest outputs first, to one common cap); returns whether anything was cut.
pub(crate) fn shrink_outputs(turns: &mut [Turn], excess: usize) -> bool {
    let lengths: Vec<usize> = turns
        .iter()
        .filter_map(|t| match t {
            Turn::ToolResults(r) => Some(r.results.iter().map(|r| r.content.len())),
            _ => None,
        })
        .flatten()
        .collect();
    let total: usize = lengths.iter().sum();
    let target = total.saturating_sub(excess.saturating_mul(BYTES_PER_TOKEN));
    let saved = |cap: usize| lengths.iter().map(|&l| l.min(cap)).sum::<usize>();
    let (mut low, mut high) = (MIN_OUTPUT_BYTES, lengths.iter().copied().max().unwrap_or(0));
    if high <= low {
        return false;
    }
    while low < high {
        let mid = low + (high - low).div_ceil(2);
        if saved(mid) <= target {
            low = mid;
        } else {
            high = mid - 1;
        }
    }
    let mut changed = false;
    for turn in turns {
        if let Turn::ToolResults(results) = turn {
            for result in &mut results.results {
                if result.content.len() > low + 64 {
                    result.content = middle_out(&result.content, low);
                    changed = true;
                }
            }
        }
    }
    changed
}
