//! The conformance checker, the one for every format and every path a stream takes (the
//! live client, `decode_stream`, the CLI's events build on it): it compares a decoded
//! [`Response`] (or [`Error`]) with a recorded stream's `.expected.json` in
//! `tests/data/conformance` (read in place, never copied or edited), and replays each
//! recorded stream through a public decoder at every split point ([`replay`]).
//!
//! What is compared, field by field (a field absent from the expected file is not checked,
//! except where said):
//!
//! * `text` — `Response::text()`, the concatenation of the text parts.
//! * `tool_calls` — same count and order; `name`, parsed `arguments` (JSON equality), and
//!   `id` unless the file says `null` (Gemini sends no ids; decoders make their own, which
//!   must not be empty), `item_id` when present, and `kind` (a call without one must not be
//!   a freeform `custom` call).
//! * `reasoning` — `Response::reasoning()`: the non-redacted thinking parts joined with
//!   `"\n\n"` (`null` means no reasoning text). The expected files join Anthropic thinking
//!   blocks in block order and OpenAI Responses summary parts with `"\n\n"` (one thinking
//!   part per summary part fits), but Gemini thought parts and Chat Completions reasoning
//!   deltas are concatenated with no separator: those decoders must accumulate consecutive
//!   reasoning into one thinking part.
//! * `finish_reason` — the raw value; `finish_reason_normalized` — the unified kind
//!   (`stop`, `tool_calls`, `length`, `content_filter`, `other`); `incomplete_reason` — the
//!   finish is `length` with the warning `incomplete: <reason>`.
//! * `refusal` — `Response::refusal`, and a refusal also leaves the warning
//!   `refusal: <text>`.
//! * `usage` — each field present: `input_tokens`, `output_tokens`, `total_tokens`,
//!   `reasoning_tokens`, `cache_read_tokens`, `cache_creation_tokens` (our
//!   `cache_write_tokens`) and `cache_creation_1h_tokens` (our `cache_write_1h_tokens`,
//!   the writes of Anthropic's 1-hour TTL); an expected number must be reported as exactly that number
//!   (an expected `0` is not met by `None`).
//! * `redacted_reasoning_blocks` — the number of redacted thinking parts;
//!   `reasoning_signature_prefixes` — the signatures of the non-redacted thinking parts
//!   start with these, in order; `block_types` (Anthropic) — the parts' kinds in order
//!   (`text`, `thinking`, `redacted_thinking`, `tool_use`); `thought_signatures` (Gemini)
//!   — how many parts (text, call or thinking) carry a signature.
//! * `error` — `status` (an in-stream error recorded with 200 reports no status),
//!   `retryable` against `Error::is_retryable()` and `message_contains` against the message
//!   (both required), the error's `code()` (equal to a string `code`; to a numeric `code`
//!   or the `type`; to the `type`, or none, when there is no `code`), and
//!   `retry_after_seconds` against `retry_after()`.

use std::path::{Path, PathBuf};

use agentloop::Error;
use agentloop::llm::{ContentPart, FinishKind, Response, StreamEvent, ToolKind};
use agentloop::unstable::{SseEvent as Event, SseParser as Parser};
use serde_json::Value;

/// `tests/data/conformance`: the repository's copy of the recorded corpus, with its sources.
pub fn dir() -> PathBuf {
    crate::data_dir().join("conformance")
}

/// The files in `dir()/sub` whose names end with `suffix`, sorted.
pub fn files(sub: &str, suffix: &str) -> Vec<PathBuf> {
    let folder = dir().join(sub);
    let mut out: Vec<PathBuf> = std::fs::read_dir(&folder)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", folder.display()))
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            name.ends_with(suffix) && !name.ends_with(".expected.json")
        })
        .collect();
    out.sort();
    out
}

/// The `.sse` captures of one format folder (`anthropic`, `openai-chat`, …).
pub fn sse_files(format: &str) -> Vec<PathBuf> {
    files(format, ".sse")
}

/// The error bodies in `errors/` whose names start with `prefix`.
pub fn error_files(prefix: &str) -> Vec<PathBuf> {
    files("errors", ".json")
        .into_iter()
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(prefix))
        })
        .collect()
}

/// The error bodies in `errors/` whose expected file's `provider` (the server that
/// recorded them) `recorded_from` accepts.
pub fn error_files_recorded_from(recorded_from: impl Fn(&str) -> bool) -> Vec<PathBuf> {
    files("errors", ".json")
        .into_iter()
        .filter(|p| recorded_from(expected_for(p)["provider"].as_str().unwrap_or_default()))
        .collect()
}

/// The parsed `<file>.expected.json` of a capture.
pub fn expected_for(capture: &Path) -> Value {
    let mut name = capture.as_os_str().to_owned();
    name.push(".expected.json");
    let text = std::fs::read_to_string(&name)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", Path::new(&name).display()));
    serde_json::from_str(&text).expect("expected.json is JSON")
}

/// The HTTP status and content type an `errors/` capture was served with.
pub fn expected_http(expected: &Value) -> (u16, String) {
    let http = &expected["http"];
    let status = http["status"].as_u64().expect("http.status") as u16;
    let content_type = http["content_type"]
        .as_str()
        .unwrap_or("application/json")
        .to_string();
    (status, content_type)
}

/// The unified finish kind's name as the expected files spell it.
pub fn finish_kind_name(kind: FinishKind) -> &'static str {
    match kind {
        FinishKind::Stop => "stop",
        FinishKind::Length => "length",
        FinishKind::ToolCalls => "tool_calls",
        FinishKind::ContentFilter => "content_filter",
        FinishKind::Error => "error",
        FinishKind::Other => "other",
    }
}

fn part_type(part: &ContentPart) -> &'static str {
    match part {
        ContentPart::Text { .. } => "text",
        ContentPart::Thinking(t) if t.redacted => "redacted_thinking",
        ContentPart::Thinking(_) => "thinking",
        ContentPart::ToolCall(_) => "tool_use",
        ContentPart::ToolResult(_) => "tool_result",
        ContentPart::Image(_) => "image",
        _ => "unknown",
    }
}

/// Every difference between `response` and `expected` (empty when they agree).
pub fn response_mismatches(expected: &Value, response: &Response) -> Vec<String> {
    let mut diffs = Vec::new();
    fn check(diffs: &mut Vec<String>, what: &str, want: &Value, got: Value) {
        if *want != got {
            diffs.push(format!("{what}: expected {want}, got {got}"));
        }
    }
    if let Some(want) = expected.get("text").filter(|v| !v.is_null()) {
        check(&mut diffs, "text", want, Value::String(response.text()));
    }
    if let Some(want) = expected.get("refusal") {
        check(
            &mut diffs,
            "refusal",
            want,
            response.refusal.clone().map_or(Value::Null, Value::String),
        );
        if let Some(refusal) = want.as_str() {
            let warning = format!("refusal: {refusal}");
            if !response.warnings.contains(&warning) {
                diffs.push(format!(
                    "warnings: no {warning:?} in {:?}",
                    response.warnings
                ));
            }
        }
    }
    if let Some(reason) = expected.get("incomplete_reason").and_then(Value::as_str) {
        if response.finish_reason.reason != FinishKind::Length {
            diffs.push(format!(
                "incomplete_reason: the finish is {:?}, not length",
                response.finish_reason.reason
            ));
        }
        let warning = format!("incomplete: {reason}");
        if !response.warnings.contains(&warning) {
            diffs.push(format!(
                "warnings: no {warning:?} in {:?}",
                response.warnings
            ));
        }
    }
    if let Some(want) = expected.get("reasoning") {
        check(
            &mut diffs,
            "reasoning",
            want,
            response.reasoning().map_or(Value::Null, Value::String),
        );
    }
    if let Some(want) = expected.get("finish_reason").filter(|v| !v.is_null()) {
        check(
            &mut diffs,
            "finish_reason",
            want,
            response
                .finish_reason
                .raw
                .clone()
                .map_or(Value::Null, Value::String),
        );
    }
    if let Some(want) = expected
        .get("finish_reason_normalized")
        .filter(|v| !v.is_null())
    {
        check(
            &mut diffs,
            "finish_reason_normalized",
            want,
            Value::from(finish_kind_name(response.finish_reason.reason)),
        );
    }
    if let Some(Value::Object(usage)) = expected.get("usage") {
        let u = &response.usage;
        for (field, want) in usage {
            let got = match field.as_str() {
                "input_tokens" => Some(u.input_tokens),
                "output_tokens" => Some(u.output_tokens),
                "total_tokens" => Some(u.total_tokens),
                "reasoning_tokens" => u.reasoning_tokens,
                "cache_read_tokens" => u.cache_read_tokens,
                "cache_creation_tokens" => u.cache_write_tokens,
                "cache_creation_1h_tokens" => u.cache_write_1h_tokens,
                other => {
                    diffs.push(format!(
                        "usage.{other}: the checker does not know this field"
                    ));
                    continue;
                }
            };
            check(
                &mut diffs,
                &format!("usage.{field}"),
                want,
                got.map_or(Value::Null, Value::from),
            );
        }
    }
    if let Some(Value::Array(want_calls)) = expected.get("tool_calls") {
        let calls = response.tool_calls();
        if calls.len() != want_calls.len() {
            diffs.push(format!(
                "tool_calls: expected {} calls, got {}: {calls:?}",
                want_calls.len(),
                calls.len()
            ));
        } else {
            for (i, (want, got)) in want_calls.iter().zip(calls).enumerate() {
                match want.get("id").filter(|v| !v.is_null()) {
                    Some(id) => check(
                        &mut diffs,
                        &format!("tool_calls[{i}].id"),
                        id,
                        Value::from(got.id.as_str()),
                    ),
                    None if got.id.is_empty() => {
                        diffs.push(format!("tool_calls[{i}].id: a call without one gets one"));
                    }
                    None => {}
                }
                check(
                    &mut diffs,
                    &format!("tool_calls[{i}].name"),
                    &want["name"],
                    Value::from(got.name.as_str()),
                );
                check(
                    &mut diffs,
                    &format!("tool_calls[{i}].arguments"),
                    &want["arguments"],
                    got.arguments.clone(),
                );
                if let Some(item_id) = want.get("item_id").filter(|v| !v.is_null()) {
                    check(
                        &mut diffs,
                        &format!("tool_calls[{i}].item_id"),
                        item_id,
                        got.item_id.clone().map_or(Value::Null, Value::String),
                    );
                }
                match want.get("kind").filter(|v| !v.is_null()) {
                    Some(kind) => check(
                        &mut diffs,
                        &format!("tool_calls[{i}].kind"),
                        kind,
                        serde_json::to_value(got.kind).expect("kind serialises"),
                    ),
                    None if got.kind == ToolKind::Custom => {
                        diffs.push(format!("tool_calls[{i}].kind: custom, none recorded"));
                    }
                    None => {}
                }
            }
        }
    }
    let thinking: Vec<_> = response
        .message
        .content
        .iter()
        .filter_map(|p| match p {
            ContentPart::Thinking(t) => Some(t),
            _ => None,
        })
        .collect();
    if let Some(want) = expected.get("redacted_reasoning_blocks") {
        let got = thinking.iter().filter(|t| t.redacted).count();
        check(
            &mut diffs,
            "redacted_reasoning_blocks",
            want,
            Value::from(got),
        );
    }
    if let Some(Value::Array(prefixes)) = expected.get("reasoning_signature_prefixes") {
        let signatures: Vec<&str> = thinking
            .iter()
            .filter(|t| !t.redacted)
            .filter_map(|t| t.signature.as_deref())
            .collect();
        if signatures.len() != prefixes.len() {
            diffs.push(format!(
                "reasoning_signature_prefixes: expected {} signatures, got {}",
                prefixes.len(),
                signatures.len()
            ));
        }
        for (want, got) in prefixes.iter().zip(&signatures) {
            let want = want.as_str().unwrap_or_default();
            if !got.starts_with(want) {
                diffs.push(format!("signature {got:?} does not start with {want:?}"));
            }
        }
    }
    if let Some(want) = expected.get("thought_signatures") {
        let got = response
            .message
            .content
            .iter()
            .filter(|p| match p {
                ContentPart::Text { signature, .. } => signature.is_some(),
                ContentPart::ToolCall(call) => call.signature.is_some(),
                ContentPart::Thinking(t) => t.signature.is_some(),
                _ => false,
            })
            .count();
        check(&mut diffs, "thought_signatures", want, Value::from(got));
    }
    if let Some(want) = expected.get("block_types") {
        let got: Vec<Value> = response
            .message
            .content
            .iter()
            .map(|p| Value::from(part_type(p)))
            .collect();
        check(&mut diffs, "block_types", want, Value::Array(got));
    }
    if let Some(err) = expected.get("error").filter(|v| !v.is_null()) {
        diffs.push(format!("expected the error {err}, got a response"));
    }
    diffs
}

/// Every difference between `err` and the expected file's `error` (empty when they agree).
pub fn error_mismatches(expected: &Value, err: &Error) -> Vec<String> {
    let mut diffs = Vec::new();
    let Some(want) = expected.get("error").filter(|v| !v.is_null()) else {
        return vec![format!("expected a response, got the error {err:?}")];
    };
    if let Some(status) = want.get("status").and_then(Value::as_u64) {
        // A 200 is an error inside the event stream: it has no HTTP status of its own.
        let want_status = (status != 200).then_some(status);
        if err.status().map(u64::from) != want_status {
            diffs.push(format!("status: expected {status}, got {:?}", err.status()));
        }
    }
    match want.get("retryable").and_then(Value::as_bool) {
        Some(retryable) if err.is_retryable() != retryable => diffs.push(format!(
            "retryable: expected {retryable}, got {} (kind {:?})",
            err.is_retryable(),
            err.kind()
        )),
        Some(_) => {}
        None => diffs.push("the expected error has no `retryable`".to_string()),
    }
    match want.get("message_contains").and_then(Value::as_str) {
        Some(needle) if !err.message().contains(needle) => diffs.push(format!(
            "message: expected it to contain {needle:?}, got {:?}",
            err.message()
        )),
        Some(_) => {}
        None => diffs.push("the expected error has no `message_contains`".to_string()),
    }
    let want_type = want.get("type").and_then(Value::as_str);
    let code = err.code();
    let code_ok = match want.get("code").filter(|c| !c.is_null()) {
        Some(Value::String(c)) => code == Some(c.as_str()),
        Some(Value::Number(n)) => code == Some(n.to_string().as_str()) || code == want_type,
        _ => code == want_type,
    };
    if !code_ok {
        diffs.push(format!(
            "code: expected {:?} (type {want_type:?}), got {code:?}",
            want.get("code")
        ));
    }
    if let Some(secs) = want.get("retry_after_seconds").and_then(Value::as_f64) {
        let got = err.retry_after().map(|d| d.as_secs_f64());
        if !got.is_some_and(|g| (g - secs).abs() < 1e-6) {
            diffs.push(format!("retry_after: expected {secs} s, got {got:?}"));
        }
    }
    diffs
}

/// Panics with every mismatch, naming the capture, with one documented reading: the corpus
/// normalises a raw `stop`/`STOP` that carries tool calls (Ollama, Gemini) to `stop`, while
/// the unified spec (§3.8: Gemini "(has tool calls) → tool_calls") asks for `tool_calls`.
/// That one difference is accepted when the response has tool calls; the raw value is still
/// compared exactly.
pub fn assert_response(capture: &Path, how: &str, response: &Response) {
    let inferred = "finish_reason_normalized: expected \"stop\", got \"tool_calls\"";
    let diffs: Vec<String> = response_mismatches(&expected_for(capture), response)
        .into_iter()
        .filter(|d| d != inferred || response.tool_calls().is_empty())
        .collect();
    assert!(
        diffs.is_empty(),
        "{} ({how}):\n  {}",
        capture.display(),
        diffs.join("\n  ")
    );
}

/// Panics with every mismatch, naming the capture.
pub fn assert_error(capture: &Path, how: &str, err: &Error) {
    let diffs = error_mismatches(&expected_for(capture), err);
    assert!(
        diffs.is_empty(),
        "{} ({how}):\n  {}",
        capture.display(),
        diffs.join("\n  ")
    );
}

/// The split points [`replay`] tries: every one for bodies up to 4 KiB; for larger bodies
/// every point in the first and last 128 bytes and 256 more spread evenly between.
pub fn split_points(len: usize) -> Vec<usize> {
    if len <= 4 * 1024 {
        return (0..=len).collect();
    }
    let mut points: Vec<usize> = (0..128).collect();
    let stride = (len - 256) / 256;
    points.extend((128..len - 128).step_by(stride.max(1)));
    points.extend(len - 128..=len);
    points
}

/// The events the public SSE parser gives for `body` read in `reads`.
fn parse_in(reads: &[&[u8]]) -> Vec<Event> {
    let mut parser = Parser::new();
    let mut events = Vec::new();
    for read in reads {
        parser.feed(read, &mut events);
    }
    parser.finish(&mut events);
    events
}

/// Replays a recorded stream through a format's public decoder (`decode_stream`: the SSE
/// parser, then the format's decoder over each event) whole, one byte per read, and in two
/// reads at every one of [`split_points`], and checks the result against the capture's
/// `.expected.json`. Returns the decoded result.
///
/// A read boundary reaches the decoder only through the parser, which hands it whole
/// events: so the decoder's result at a split is its result for the events the parser gave
/// there, and each split is checked by asserting that those events are exactly the whole
/// body's (every split point here; every split of every capture, in windows, in
/// `tests/it/llm/sse.rs`), with the whole body's decoding checked against the expected
/// file once. The deltas a stream shows on the way are checked on the live client's
/// events ([`streamed_text_and_reasoning`]).
pub fn replay(
    capture: &Path,
    decode_stream: fn(&[u8]) -> agentloop::Result<Response>,
) -> agentloop::Result<Response> {
    let body = std::fs::read(capture).expect("read the capture");
    let decoded = decode_stream(&body);
    match &decoded {
        Ok(response) => assert_response(capture, "decode_stream", response),
        Err(err) => assert_error(capture, "decode_stream", err),
    }
    let whole = parse_in(&[&body]);
    let bytes: Vec<&[u8]> = body.chunks(1).collect();
    assert!(
        parse_in(&bytes) == whole,
        "{}: the events differ read one byte at a time",
        capture.display()
    );
    for at in split_points(body.len()) {
        assert!(
            parse_in(&[&body[..at], &body[at..]]) == whole,
            "{}: the events differ when the body is split at byte {at}",
            capture.display()
        );
    }
    decoded
}

/// The concatenated text and reasoning deltas of a stream's events.
pub fn streamed_text_and_reasoning(events: &[StreamEvent]) -> (String, String) {
    let mut text = String::new();
    let mut reasoning = String::new();
    for event in events {
        match event {
            StreamEvent::TextDelta { delta, .. } => text.push_str(delta),
            StreamEvent::ReasoningDelta { delta } => reasoning.push_str(delta),
            _ => {}
        }
    }
    (text, reasoning)
}
