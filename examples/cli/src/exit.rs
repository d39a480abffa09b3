//! The CLI's exit statuses, one table (`agentloop --help` prints it, the CLI manual
//! repeats it), and the `exit` record that ends `--json` output: the status, the reason
//! in words and a sentence. A harness reads the status; the record says why. This file
//! only records and reports; `main.rs` decides the status.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// The agent finished its input (whether the task succeeded is the verifier's business).
pub const EXIT_OK: i32 = 0;
/// Anything else that failed: a local I/O error, a closed stdout, a tool environment
/// that could not start.
pub const EXIT_ERROR: i32 = 1;
/// Bad usage or configuration found before anything started (an unknown flag, a missing
/// key or provider, an unusable file).
pub const EXIT_USAGE: i32 = 2;
/// A turn, tool-round or budget limit stopped the agent.
pub const EXIT_LIMIT: i32 = 3;
/// No final answer valid against `--output-schema`.
pub const EXIT_NO_OUTPUT: i32 = 4;
/// The provider failed after the retries (network, timeout, overload, server error, rate
/// limit, a malformed stream or a refused request): trying again later may succeed.
pub const EXIT_PROVIDER: i32 = 5;
/// The provider refused the account for good (a key it rejects, no access, an unknown
/// model, no credit left): retrying will not help until the configuration changes.
pub const EXIT_REFUSED: i32 = 6;
/// Interrupted by Ctrl-C (SIGINT); `128 + n` for another signal (143 SIGTERM, 129 SIGHUP).
pub const EXIT_INTERRUPTED: i32 = 130;

/// Whether the `exit` record is written (`--json` runs of a prompt).
static JSON: AtomicBool = AtomicBool::new(false);

/// What made the run end, as the code that found it said it: a word (an error kind, a
/// stop reason) and a sentence. The last one recorded is reported.
static WHY: Mutex<Option<(String, String)>> = Mutex::new(None);

/// The session's token counts and cost, from its `session_end` event (what a harness
/// reads from the record without parsing every event).
static TOTALS: Mutex<Option<serde_json::Value>> = Mutex::new(None);

/// Records the session's totals for the `exit` record.
pub fn totals(usage: &agentloop::llm::Usage, cost_usd: Option<f64>) {
    let totals = serde_json::json!({
        "input_tokens": usage.input_tokens,
        "cache_read_tokens": usage.cache_read_tokens.unwrap_or(0),
        "cache_write_tokens": usage.cache_write_tokens.unwrap_or(0),
        "output_tokens": usage.output_tokens,
        "cost_usd": cost_usd,
    });
    *TOTALS.lock().unwrap_or_else(|p| p.into_inner()) = Some(totals);
}

/// Writes the `exit` record at the end (a `--json` run).
pub fn json_record(on: bool) {
    JSON.store(on, Ordering::SeqCst);
}

/// Records why the run is ending: `detail` a word (`rate_limited`, `budget_exhausted`),
/// `message` a sentence without secrets.
pub fn because(detail: &str, message: &str) {
    let mut why = WHY.lock().unwrap_or_else(|p| p.into_inner());
    *why = Some((detail.to_string(), message.to_string()));
}

/// The status for an error event's kind (`ErrorKind::as_str`).
pub fn for_error_kind(kind: &str) -> i32 {
    match kind {
        "authentication" | "access_denied" | "not_found" | "quota" => EXIT_REFUSED,
        "configuration" | "io" | "session_closed" | "aborted" | "structured_output" => EXIT_ERROR,
        _ => EXIT_PROVIDER,
    }
}

/// The reason of a status in words, as the `exit` record names it.
pub fn reason(code: i32) -> &'static str {
    match code {
        EXIT_OK => "completed",
        EXIT_ERROR => "error",
        EXIT_USAGE => "usage",
        EXIT_LIMIT => "limit",
        EXIT_NO_OUTPUT => "no_valid_output",
        EXIT_PROVIDER => "provider_error",
        EXIT_REFUSED => "provider_refused",
        EXIT_INTERRUPTED => "interrupted",
        143 => "terminated",
        129 => "hangup",
        _ => "signal",
    }
}

/// The `exit` record for `code` (one JSON line, newline included), with the session's
/// `usage` when one ran, or `None` outside `--json`.
pub fn record(code: i32) -> Option<String> {
    if !JSON.load(Ordering::SeqCst) {
        return None;
    }
    let why = WHY.lock().unwrap_or_else(|p| p.into_inner()).take();
    let reason = reason(code);
    // A signal's status is the signal's, whatever was recorded before it came.
    let (detail, message) = match why {
        Some((detail, message)) if code < 128 => (detail, message),
        _ => (reason.to_string(), default_message(code).to_string()),
    };
    let mut record = serde_json::json!({
        "kind": "exit",
        "data": {"code": code, "reason": reason, "detail": detail, "message": message},
    });
    if let Some(totals) = TOTALS.lock().unwrap_or_else(|p| p.into_inner()).take() {
        record["data"]["usage"] = totals;
    }
    Some(format!("{record}\n"))
}

fn default_message(code: i32) -> &'static str {
    match code {
        EXIT_OK => "the agent finished its input",
        EXIT_ERROR => "the run failed",
        EXIT_USAGE => "bad usage or configuration",
        EXIT_LIMIT => "a limit stopped the agent",
        EXIT_NO_OUTPUT => "no final answer valid against the output schema",
        EXIT_PROVIDER => "the provider failed after the retries",
        EXIT_REFUSED => "the provider refused the request",
        EXIT_INTERRUPTED => "interrupted by Ctrl-C",
        143 => "terminated by SIGTERM",
        129 => "ended by SIGHUP",
        _ => "ended by a signal",
    }
}
