//! How the `agentloop` CLI shows a session: one JSON object per event (`--json`), or a
//! human view — streamed answer text, one line per tool call, a summary per input, and a
//! live indicator on stderr when stderr is a terminal.
//!
//! Rendering never changes the session; it only writes to stdout and stderr. In the human
//! view, text from the model, from commands and from files never reaches the terminal as
//! control sequences (clipboard writes, title changes, screen clears): every control
//! character is shown as visible text (see [`safe`]); the only escapes written are our own
//! plain colours and the indicator's line clear.

use std::collections::HashMap;
use std::io::{self, Write};
use std::time::{Duration, Instant};

use agentloop::llm::Usage;
use agentloop::session::compaction::CompactionFallback;
use agentloop::session::{
    BudgetKind, BudgetScope, EventKind, HookDecision, SessionEvent, StopReason,
};
use serde_json::Value;

/// Where events go.
pub enum Output {
    /// One JSON object per line on stdout, each written whole from this buffer (one
    /// `write` per event, not one per fragment of the serializer through stdout's line
    /// buffer).
    Json(Vec<u8>),
    /// The human view.
    Human(Box<Human>),
}

impl Output {
    /// Shows one event. An error means stdout is gone (a closed pipe).
    pub fn event(&mut self, event: &SessionEvent) -> io::Result<()> {
        match self {
            Output::Json(line) => {
                line.clear();
                serde_json::to_writer(&mut *line, event)?;
                line.push(b'\n');
                let mut out = io::stdout().lock();
                out.write_all(line)?;
                out.flush()
            }
            Output::Human(human) => human.event(event),
        }
    }

    /// Called when no event arrived for a while: redraws the live indicator.
    pub fn tick(&mut self) {
        if let Output::Human(human) = self {
            human.tick();
        }
    }

    /// Removes the live indicator before something else is written to the terminal.
    pub fn clear_indicator(&mut self) {
        if let Output::Human(human) = self {
            human.clear_indicator();
        }
    }

    /// Whether `tick` does anything (a live indicator is on).
    pub fn wants_ticks(&self) -> bool {
        matches!(self, Output::Human(h) if h.indicator)
    }
}

/// ANSI styles, or nothing when colour is off.
struct Style {
    dim: &'static str,
    red: &'static str,
    green: &'static str,
    bold: &'static str,
    reset: &'static str,
}

const COLOUR: Style = Style {
    dim: "\x1b[2m",
    red: "\x1b[31m",
    green: "\x1b[32m",
    bold: "\x1b[1m",
    reset: "\x1b[0m",
};
const PLAIN: Style = Style {
    dim: "",
    red: "",
    green: "",
    bold: "",
    reset: "",
};

/// A tool call in flight.
struct Call {
    name: String,
    summary: String,
    /// The first lines of its live output.
    preview: Vec<String>,
    /// A line being received.
    partial: String,
}

/// Lines of command output shown under a tool line.
const PREVIEW_LINES: usize = 6;
const SPINNER: &[char] = &['|', '/', '-', '\\'];

/// The human view.
pub struct Human {
    style: &'static Style,
    indicator: bool,
    echo_input: bool,
    /// Stdout is in the middle of a line of answer text.
    mid_line: bool,
    calls: HashMap<String, Call>,
    /// What the agent is doing, for the indicator (`None` when idle).
    busy: Option<String>,
    busy_since: Instant,
    indicator_shown: bool,
    frame: usize,
    last_write: Instant,
    // Per input.
    started: Instant,
    model_calls: usize,
    cwd: String,
    /// Everything goes to stderr (stdout is kept for `--output-schema`'s value).
    on_stderr: bool,
    /// Whether the model has a price (else the footer says "no price", not `$0.0000`).
    priced: bool,
}

impl Human {
    /// A view writing colour when `colour`, a live indicator on stderr when `indicator`,
    /// and each input's text when `echo_input` (a prompt the user did not type here).
    pub fn new(colour: bool, indicator: bool, echo_input: bool, cwd: String) -> Human {
        Human {
            style: if colour { &COLOUR } else { &PLAIN },
            indicator,
            echo_input,
            mid_line: false,
            calls: HashMap::new(),
            busy: None,
            busy_since: Instant::now(),
            indicator_shown: false,
            frame: 0,
            last_write: Instant::now(),
            started: Instant::now(),
            model_calls: 0,
            cwd,
            on_stderr: false,
            priced: true,
        }
    }

    /// Says "no price" in the footer instead of a cost when the model has none.
    pub fn priced(mut self, priced: bool) -> Human {
        self.priced = priced;
        self
    }

    /// Writes the view to stderr instead of stdout when `on_stderr`.
    pub fn on_stderr(mut self, on_stderr: bool) -> Human {
        self.on_stderr = on_stderr;
        self
    }

    /// Where the view's text goes.
    fn out(&self) -> Box<dyn Write> {
        if self.on_stderr {
            Box::new(io::stderr().lock())
        } else {
            Box::new(io::stdout().lock())
        }
    }

    /// Prints a line of its own on stdout (after ending a line of answer text).
    pub fn line(&mut self, text: &str) -> io::Result<()> {
        self.clear_indicator();
        let mut out = self.out();
        if self.mid_line {
            out.write_all(b"\n")?;
            self.mid_line = false;
        }
        writeln!(out, "{text}")?;
        out.flush()?;
        self.last_write = Instant::now();
        Ok(())
    }

    /// Ends a line of answer text, if one is open.
    fn end_line(&mut self) -> io::Result<()> {
        if self.mid_line {
            let mut out = self.out();
            out.write_all(b"\n")?;
            out.flush()?;
            self.mid_line = false;
        }
        Ok(())
    }

    fn busy(&mut self, what: Option<String>) {
        self.busy = what;
        self.busy_since = Instant::now();
    }

    fn event(&mut self, event: &SessionEvent) -> io::Result<()> {
        let s = self.style;
        match &event.kind {
            EventKind::SessionStart { provider, model } => {
                let cwd = self.cwd.clone();
                self.line(&format!(
                    "{}agentloop · {} · {} · {}{}",
                    s.dim,
                    safe(provider),
                    safe(model),
                    safe(&cwd),
                    s.reset
                ))?;
            }
            EventKind::UserInput { content } => {
                self.started = Instant::now();
                self.model_calls = 0;
                if self.echo_input {
                    let first = content.lines().next().unwrap_or("");
                    let more = if content.lines().nth(1).is_some() {
                        " …"
                    } else {
                        ""
                    };
                    let first = safe(first);
                    self.line(&format!("{}> {first}{more}{}", s.bold, s.reset))?;
                }
                self.busy(Some("thinking".to_string()));
            }
            EventKind::AssistantTextStart {} => self.busy(Some("thinking".to_string())),
            EventKind::AssistantTextDelta { delta } => {
                self.clear_indicator();
                let delta = safe(delta);
                let mut out = self.out();
                out.write_all(delta.as_bytes())?;
                out.flush()?;
                if !delta.is_empty() {
                    self.mid_line = !delta.ends_with('\n');
                }
                self.last_write = Instant::now();
            }
            EventKind::AssistantTextEnd { .. } => {
                self.model_calls += 1;
                self.end_line()?;
            }
            EventKind::ToolCallStart { .. }
            | EventKind::ToolCallOutputDelta { .. }
            | EventKind::ToolCallEnd { .. } => self.tool_event(&event.kind, None)?,
            EventKind::SubagentEvent { agent_id, event } => {
                self.tool_event(&event.kind, Some(agent_id))?
            }
            EventKind::SteeringInjected { content } => {
                self.line(&format!(
                    "{}  ↳ steering: {}{}",
                    s.dim,
                    clip(content, 160),
                    s.reset
                ))?;
            }
            EventKind::TurnLimit { round, total_turns } => {
                let why = match (round, total_turns) {
                    (Some(n), _) => format!("{n} tool rounds for one input (--max-rounds)"),
                    (None, Some(n)) => format!("{n} model calls in this session (--max-turns)"),
                    (None, None) => "a limit".to_string(),
                };
                self.line(&format!(
                    "{}stopped: reached the limit of {why}{}",
                    s.red, s.reset
                ))?;
            }
            EventKind::ContextCompactionEnd {
                reason,
                tokens_before,
                tokens_after,
                turns_summarised,
                fallback,
                ..
            } => {
                let lost = match fallback {
                    CompactionFallback::Truncated => " (tool outputs cut)",
                    CompactionFallback::Dropped => " (some turns dropped)",
                    _ => "",
                };
                self.line(&format!(
                    "{}  ↳ context compacted ({}): ~{tokens_before} → ~{tokens_after} tokens, \
                     {turns_summarised} turns summarised{lost}{}",
                    s.dim,
                    reason.as_str(),
                    s.reset
                ))?;
            }
            EventKind::BudgetWarning {
                which,
                scope,
                limit,
                used,
            } => self.warn(&format!(
                "{} budget of the {}: {} of {} used",
                budget_name(*which),
                budget_scope(*scope),
                budget_figure(*which, *used),
                budget_figure(*which, *limit)
            )),
            EventKind::BudgetExhausted {
                which,
                scope,
                limit,
                used,
            } => {
                let line = format!(
                    "{}stopped: the {} budget of the {} is used up ({} of {}){}",
                    s.red,
                    budget_name(*which),
                    budget_scope(*scope),
                    budget_figure(*which, *used),
                    budget_figure(*which, *limit),
                    s.reset
                );
                self.line(&line)?;
            }
            EventKind::ModelFallback {
                from_model,
                to_provider,
                to_model,
                error_kind,
                ..
            } => self.warn(&format!(
                "{} failed ({error_kind}); continuing with {}/{}",
                safe(from_model),
                safe(to_provider),
                safe(to_model)
            )),
            EventKind::BackgroundExit {
                id,
                command,
                exit_code,
                signal,
                stopped,
                ..
            } => {
                let how = match (exit_code, signal) {
                    (Some(code), _) => format!("exited with code {code}"),
                    (None, _) if *stopped => "was stopped".to_string(),
                    (None, Some(signal)) => format!("was killed by signal {signal}"),
                    (None, None) => "ended".to_string(),
                };
                self.line(&format!(
                    "{}  ↳ background process {id} ({}) {how}{}",
                    s.dim,
                    clip(command, 80),
                    s.reset
                ))?;
            }
            EventKind::LoopDetection { message } => self.warn(message),
            EventKind::Warning { message, .. } => self.warn(message),
            EventKind::Error { message, .. } => {
                self.clear_indicator();
                self.end_line()?;
                say!("{}error: {}{}", s.red, safe(message), s.reset);
            }
            EventKind::HookDecision { hook, decision, .. }
                if !matches!(decision, HookDecision::Continue) =>
            {
                let line = format!(
                    "{}  ↳ hook {hook}: {}{}",
                    s.dim,
                    hook_summary(decision),
                    s.reset
                );
                self.line(&line)?;
            }
            EventKind::ProcessingEnd {
                stop_reason,
                rounds,
                usage,
                cost_usd,
                ..
            } => {
                self.busy(None);
                let how = match stop_reason {
                    StopReason::Completed => "done",
                    StopReason::TurnLimit | StopReason::RoundLimit => "stopped by a limit",
                    StopReason::Interrupted => "interrupted",
                    StopReason::Aborted => "aborted",
                    StopReason::Error => "failed",
                    StopReason::Blocked => "blocked by a hook",
                    StopReason::BudgetExhausted => "stopped by a budget",
                    StopReason::StructuredOutputFailed => "no valid final answer",
                    _ => "stopped",
                };
                let took = self.started.elapsed().as_secs_f64();
                let line = format!(
                    "{}── {how} · {rounds} tool round{} · {} model call{} · {} · {took:.2} s{}",
                    s.dim,
                    plural(*rounds),
                    self.model_calls,
                    plural(self.model_calls),
                    usage_summary(usage, cost_usd.filter(|_| self.priced), self.priced),
                    s.reset
                );
                self.line(&line)?;
            }
            _ => {}
        }
        Ok(())
    }

    /// A tool call's start, output or end; `agent` names the subagent it belongs to.
    fn tool_event(&mut self, kind: &EventKind, agent: Option<&str>) -> io::Result<()> {
        let s = self.style;
        let key = |call_id: &str| match agent {
            Some(agent) => format!("{agent}/{call_id}"),
            None => call_id.to_string(),
        };
        let indent = if agent.is_some() { "    " } else { "  " };
        let who = agent.map_or(String::new(), |a| format!("{a}: "));
        match kind {
            EventKind::ToolCallStart {
                call_id,
                tool_name,
                arguments,
            } => {
                let summary = summarise(tool_name, arguments);
                self.busy(Some(format!("{who}{tool_name} {summary}")));
                self.calls.insert(
                    key(call_id),
                    Call {
                        name: tool_name.clone(),
                        summary,
                        preview: Vec::new(),
                        partial: String::new(),
                    },
                );
            }
            EventKind::ToolCallOutputDelta { call_id, delta, .. } => {
                if let Some(call) = self.calls.get_mut(&key(call_id)) {
                    for piece in delta.split_inclusive('\n') {
                        if call.preview.len() >= PREVIEW_LINES {
                            break;
                        }
                        call.partial.push_str(piece);
                        if call.partial.ends_with('\n') {
                            let line = std::mem::take(&mut call.partial);
                            call.preview.push(line.trim_end().to_string());
                        }
                    }
                }
            }
            EventKind::ToolCallEnd {
                call_id,
                tool_name,
                output,
                error,
                is_error,
                duration_ms,
                ..
            } => {
                let call = self.calls.remove(&key(call_id));
                let (name, summary) = call
                    .as_ref()
                    .map_or((tool_name.as_str(), ""), |c| (c.name.as_str(), &c.summary));
                let name = safe(name);
                let mut status = format!("{duration_ms} ms");
                if let Some(code) = output.as_deref().and_then(exit_code) {
                    status.push_str(&format!(", exit {code}"));
                }
                let line = if *is_error {
                    let why = why_failed(error.as_deref().unwrap_or("failed"));
                    format!(
                        "{indent}{}✗ {who}{name}{} {summary} {}({status}){} {}{}{}",
                        s.red,
                        s.reset,
                        s.dim,
                        s.reset,
                        s.red,
                        clip(&why, 160),
                        s.reset
                    )
                } else {
                    format!(
                        "{indent}{}✓ {who}{name}{} {summary} {}({status}){}",
                        s.green, s.reset, s.dim, s.reset
                    )
                };
                self.line(&line)?;
                if let Some(mut call) = call {
                    if !call.partial.is_empty() && call.preview.len() < PREVIEW_LINES {
                        call.preview.push(std::mem::take(&mut call.partial));
                    }
                    for text in &call.preview {
                        let text = clip(text, 160);
                        self.line(&format!("{indent}  {}│ {text}{}", s.dim, s.reset))?;
                    }
                }
                if self.calls.is_empty() {
                    self.busy(Some("thinking".to_string()));
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn warn(&mut self, message: &str) {
        self.clear_indicator();
        let s = self.style;
        say!("{}warning: {}{}", s.red, safe(message), s.reset);
    }

    fn tick(&mut self) {
        let Some(what) = &self.busy else { return };
        if !self.indicator || self.mid_line {
            return;
        }
        if self.last_write.elapsed() < Duration::from_millis(250) {
            return;
        }
        self.frame = (self.frame + 1) % SPINNER.len();
        let elapsed = self.busy_since.elapsed().as_secs_f64();
        let mut err = io::stderr().lock();
        let _ = write!(
            err,
            "\r\x1b[2K{}{} {} {elapsed:.1} s{}",
            self.style.dim,
            SPINNER[self.frame],
            clip(what, 60),
            self.style.reset
        );
        let _ = err.flush();
        self.indicator_shown = true;
    }

    fn clear_indicator(&mut self) {
        if self.indicator_shown {
            let mut err = io::stderr().lock();
            let _ = err.write_all(b"\r\x1b[2K");
            let _ = err.flush();
            self.indicator_shown = false;
        }
    }
}

fn budget_name(which: BudgetKind) -> &'static str {
    match which {
        BudgetKind::Tokens => "token",
        BudgetKind::Cost => "cost",
        BudgetKind::WallTime => "time",
        BudgetKind::ToolCalls => "tool-call",
        _ => "a",
    }
}

fn budget_scope(scope: BudgetScope) -> &'static str {
    match scope {
        BudgetScope::Input => "input",
        _ => "session",
    }
}

/// A budget's figure in its unit: tokens, dollars, seconds or calls.
fn budget_figure(which: BudgetKind, amount: f64) -> String {
    match which {
        BudgetKind::Cost => format!("${amount:.2}"),
        BudgetKind::WallTime => format!("{amount:.0} s"),
        _ => format!("{amount:.0}"),
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// `text` with every control character but line feed and tab made visible (`ESC` as `^[`,
/// C1 controls as `<U+009B>`) and carriage returns dropped, so that nothing from the model,
/// a command or a file can move the cursor, clear the screen, set the title or write the
/// clipboard.
pub fn safe(text: &str) -> std::borrow::Cow<'_, str> {
    if !text
        .chars()
        .any(|c| c.is_control() && c != '\n' && c != '\t')
    {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' | '\t' => out.push(c),
            '\r' => {}
            '\u{7f}' => out.push_str("^?"),
            c if (c as u32) < 0x20 => {
                out.push('^');
                out.push(char::from(b'@' + c as u8));
            }
            c if c.is_control() => out.push_str(&format!("<U+{:04X}>", c as u32)),
            c => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}

/// At most `max` characters of the first line of `text`, with `…` when cut, made
/// [`safe`] for the terminal.
/// The failed line's reason: what stopped a command (an interrupt, a timeout) before the
/// tool's text, whose first words for a silent command are only `(no output)`.
fn why_failed(error: &str) -> String {
    if error.contains("[Command interrupted") {
        return "interrupted (the session was interrupted)".to_string();
    }
    if error.contains("Command timed out") {
        return "timed out".to_string();
    }
    error
        .replace("(no output)\n", "")
        .replace("(no output)", "")
}

pub fn clip(text: &str, max: usize) -> String {
    let line = text.lines().next().unwrap_or("");
    let cut = line.chars().count() > max || text.lines().nth(1).is_some();
    let line = safe(line);
    let mut out: String = line.chars().take(max).collect();
    if cut {
        out.push('…');
    }
    out
}

/// The `exit code: N` line of a shell result.
fn exit_code(output: &str) -> Option<&str> {
    output
        .lines()
        .rev()
        .find_map(|line| line.strip_prefix("exit code: "))
}

/// A short description of a call's arguments: the command, the path, the pattern.
pub fn summarise(tool: &str, arguments: &Value) -> String {
    let get = |key: &str| arguments.get(key).and_then(Value::as_str);
    let text = match tool {
        "shell" => get("command").map(str::to_string),
        "grep" => get("pattern").map(|p| match get("path") {
            Some(path) => format!("{p} in {path}"),
            None => p.to_string(),
        }),
        "glob" => get("pattern").map(str::to_string),
        "apply_patch" => get("patch").or(arguments.as_str()).map(|patch| {
            let files: Vec<&str> = patch
                .lines()
                .filter_map(|l| {
                    ["*** Add File: ", "*** Update File: ", "*** Delete File: "]
                        .iter()
                        .find_map(|p| l.strip_prefix(p))
                })
                .collect();
            files.join(", ")
        }),
        "read_many_files" => arguments.get("paths").map(|p| p.to_string()),
        _ => ["file_path", "path", "task", "agent_id"]
            .iter()
            .find_map(|k| get(k))
            .map(str::to_string),
    };
    clip(&text.unwrap_or_else(|| arguments.to_string()), 80)
}

/// The footer's token counts: in and out, then cache and reasoning where reported, then
/// the cost when the model has a price (`priced`), else "no price".
pub fn usage_summary(usage: &Usage, cost_usd: Option<f64>, priced: bool) -> String {
    let mut text = format!(
        "{} tokens in, {} out",
        usage.input_tokens, usage.output_tokens
    );
    if let Some(n) = usage.cache_read_tokens.filter(|n| *n > 0) {
        text.push_str(&format!(", {n} cache read"));
    }
    if let Some(n) = usage.cache_write_tokens.filter(|n| *n > 0) {
        text.push_str(&format!(", {n} cache write"));
    }
    if let Some(n) = usage.reasoning_tokens.filter(|n| *n > 0) {
        text.push_str(&format!(", {n} reasoning"));
    }
    match cost_usd {
        Some(cost) => text.push_str(&format!(" · ${cost:.4}")),
        None if !priced => text.push_str(" · no price"),
        None => {}
    }
    text
}

/// One line for a hook's decision.
fn hook_summary(decision: &HookDecision) -> String {
    match decision {
        HookDecision::Deny(reason) => format!("denied: {}", clip(reason, 160)),
        HookDecision::Ask => "asks for approval".to_string(),
        HookDecision::ReplaceArguments(_) => "replaced the arguments".to_string(),
        HookDecision::AddContext(text) => format!("added: {}", clip(text, 160)),
        HookDecision::ReplaceOutput(_) => "replaced the output".to_string(),
        HookDecision::ReplacePrompt(_) => "rewrote the prompt".to_string(),
        HookDecision::ContinueWith(text) => format!("continues: {}", clip(text, 160)),
        HookDecision::ReplaceSummary(_) => "replaced the summary".to_string(),
        other => format!("{other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_command_says_what_stopped_it_not_no_output() {
        let interrupted = "Tool error (shell): (no output)\nkilled by signal 15\nduration: 5 ms\n\
                           [Command interrupted: it was stopped because the session was interrupted.]";
        assert_eq!(
            why_failed(interrupted),
            "interrupted (the session was interrupted)"
        );
        let timed_out = "(no output)\nexit code: unknown\n[ERROR: Command timed out after 10ms.]";
        assert_eq!(why_failed(timed_out), "timed out");
        assert!(!why_failed("Tool error (shell): (no output)\nexit code: 1").contains("no output"));
    }

    #[test]
    fn a_model_without_a_price_says_no_price_not_zero_dollars() {
        let usage = Usage::default();
        assert!(usage_summary(&usage, None, false).ends_with(" · no price"));
        assert!(usage_summary(&usage, Some(0.0), true).ends_with(" · $0.0000"));
        assert!(!usage_summary(&usage, None, true).contains('$'));
    }
}
