//! Unit-test support for the wire formats: runs a recorded body through [`sse::Parser`]
//! and a [`Decoder`] (whole, split at a point, one byte at a time) and compares the result
//! with the conformance corpus's `.expected.json`; classifies the recorded error bodies.
//! Pure code: no server, no threads.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::error::{Error, Result};
use crate::llm::sse;
use crate::llm::wire::{Decoder, WireFormat};
use crate::llm::{FinishKind, Response, StreamEvent, ToolKind};

/// `tests/data/conformance`: the repository's copy of the recorded corpus, with its sources.
pub(crate) fn conformance_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/conformance")
}

/// The recorded bodies in `dir` (a folder of the corpus) with their expected results.
pub(crate) fn cases(dir: &str, extension: &str) -> Vec<(PathBuf, Vec<u8>, Value)> {
    let dir = conformance_dir().join(dir);
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|entry| entry.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == extension))
        .filter(|p| !p.to_string_lossy().ends_with(".expected.json"))
        .collect();
    paths.sort();
    assert!(
        !paths.is_empty(),
        "no .{extension} files in {}",
        dir.display()
    );
    paths
        .into_iter()
        .map(|path| {
            let body = std::fs::read(&path).expect("read body");
            let expected_path = PathBuf::from(format!("{}.expected.json", path.display()));
            let expected: Value =
                serde_json::from_slice(&std::fs::read(&expected_path).expect("read expected"))
                    .expect("expected.json is JSON");
            (path, body, expected)
        })
        .collect()
}

/// What decoding a body gave: every event before the end, then the response or the error.
pub(crate) struct Decoded {
    pub(crate) events: Vec<StreamEvent>,
    pub(crate) result: Result<Response>,
}

/// Feeds `chunks` through a parser and `decoder`, stopping at the first error as the HTTP
/// stream does.
pub(crate) fn decode_chunks<'a>(
    mut decoder: Box<dyn Decoder>,
    chunks: impl IntoIterator<Item = &'a [u8]>,
) -> Decoded {
    let mut parser = sse::Parser::new();
    let mut sse_events = Vec::new();
    let mut events = Vec::new();
    let fail = |events: Vec<StreamEvent>, error: Error| Decoded {
        events,
        result: Err(error),
    };
    for chunk in chunks {
        parser.feed(chunk, &mut sse_events);
        for event in sse_events.drain(..) {
            if let Err(error) = decoder.event(event, &mut events) {
                return fail(events, error);
            }
        }
    }
    parser.finish(&mut sse_events);
    for event in sse_events.drain(..) {
        if let Err(error) = decoder.event(event, &mut events) {
            return fail(events, error);
        }
    }
    if let Err(error) = decoder.end(&mut events) {
        return fail(events, error);
    }
    let response = events.iter().find_map(|e| match e {
        StreamEvent::Finish { response, .. } => Some((**response).clone()),
        _ => None,
    });
    match response {
        Some(response) => Decoded {
            events,
            result: Ok(response),
        },
        None => fail(
            events,
            Error::new(crate::ErrorKind::Stream, "no finish event"),
        ),
    }
}

/// The body whole.
pub(crate) fn decode_whole(decoder: Box<dyn Decoder>, body: &[u8]) -> Decoded {
    decode_chunks(decoder, [body])
}

/// The body one byte at a time.
pub(crate) fn decode_bytewise(decoder: Box<dyn Decoder>, body: &[u8]) -> Decoded {
    decode_chunks(decoder, body.chunks(1))
}

/// The body in two reads, split at `at`.
pub(crate) fn decode_split(decoder: Box<dyn Decoder>, body: &[u8], at: usize) -> Decoded {
    decode_chunks(decoder, [&body[..at], &body[at..]])
}

/// The split points a test tries: every one for bodies up to 4 KiB; for larger bodies
/// every point in the first and last 128 bytes and 256 more spread evenly between. The
/// decoder sees whole SSE events whatever the split, so what these exercise is the parser
/// feeding it (whose own tests try every split of every capture); every point of the
/// 100 KB captures would take minutes in a debug build.
pub(crate) fn split_points(len: usize) -> Vec<usize> {
    if len <= 4 * 1024 {
        return (0..=len).collect();
    }
    let mut points: Vec<usize> = (0..128).collect();
    let stride = (len - 256) / 256;
    points.extend((128..len - 128).step_by(stride.max(1)));
    points.extend(len - 128..=len);
    points
}

/// Decodes a capture whole, one byte at a time and in two reads at every one of
/// [`split_points`]; checks the whole and bytewise results against `expected` and that
/// every run streams the same events (ids aside). `check_split(whole, at, split)` adds a
/// format's own checks of each split run. Returns the whole run.
pub(crate) fn check_capture(
    name: &str,
    body: &[u8],
    expected: &Value,
    decoder: fn() -> Box<dyn Decoder>,
    mut check_split: impl FnMut(&Decoded, usize, &Decoded),
) -> Decoded {
    let whole = decode_whole(decoder(), body);
    check(name, expected, &whole.result);
    let shapes = event_shapes(&whole.events);
    let bytewise = decode_bytewise(decoder(), body);
    check(&format!("{name} bytewise"), expected, &bytewise.result);
    assert_eq!(event_shapes(&bytewise.events), shapes, "{name} bytewise");
    for at in split_points(body.len()) {
        let split = decode_split(decoder(), body, at);
        assert_eq!(event_shapes(&split.events), shapes, "{name} split at {at}");
        check_split(&whole, at, &split);
    }
    whole
}

/// Classifies, with `wire`, every recorded error body of the corpus whose `provider`
/// `recorded_from` accepts, and checks each against its expected error. Returns how many
/// it checked.
pub(crate) fn check_recorded_errors(
    wire: &dyn WireFormat,
    recorded_from: impl Fn(&str) -> bool,
) -> usize {
    let mut seen = 0;
    for (path, body, expected) in cases("errors", "json") {
        if !recorded_from(expected["provider"].as_str().unwrap_or_default()) {
            continue;
        }
        seen += 1;
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let status = u16::try_from(expected["http"]["status"].as_u64().unwrap()).unwrap();
        let err = wire.classify_error(status, &[], &String::from_utf8(body).unwrap());
        check_error(&name, &expected["error"], &err);
    }
    seen
}

/// A string naming the unified finish kind, as the corpus spells it.
pub(crate) fn finish_kind_name(kind: FinishKind) -> &'static str {
    match kind {
        FinishKind::Stop => "stop",
        FinishKind::Length => "length",
        FinishKind::ToolCalls => "tool_calls",
        FinishKind::ContentFilter => "content_filter",
        FinishKind::Error => "error",
        FinishKind::Other => "other",
    }
}

/// Compares a decoded result with an `.expected.json`; panics with `name` and the first
/// difference.
///
/// One documented reading: the corpus gives `finish_reason_normalized: "stop"` for streams
/// whose raw reason is `stop`/`STOP` but that carry tool calls (Ollama, Gemini). The unified
/// spec (§3.8, "Gemini (has tool calls) → tool_calls") and our contract say such a finish is
/// `tool_calls`, so that is accepted there; the raw value must still match exactly.
pub(crate) fn check(name: &str, expected: &Value, result: &Result<Response>) {
    if let Some(error) = expected.get("error").filter(|e| !e.is_null()) {
        let err = match result {
            Ok(response) => panic!("{name}: expected an error, got {response:?}"),
            Err(err) => err,
        };
        check_error(name, error, err);
        // Text and reasoning delivered before an in-stream error are checked on events.
        return;
    }
    let response = match result {
        Ok(response) => response,
        Err(err) => panic!("{name}: unexpected error {err:?}"),
    };
    if let Some(text) = expected["text"].as_str() {
        assert_eq!(response.text(), text, "{name}: text");
    }
    match &expected["reasoning"] {
        Value::Null => assert_eq!(response.reasoning(), None, "{name}: reasoning"),
        Value::String(r) => assert_eq!(
            response.reasoning().as_deref(),
            Some(r.as_str()),
            "{name}: reasoning"
        ),
        other => panic!("{name}: odd reasoning {other}"),
    }
    let calls = response.tool_calls();
    let want = expected["tool_calls"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(calls.len(), want.len(), "{name}: tool call count");
    for (call, want) in calls.iter().zip(&want) {
        assert_eq!(
            call.name,
            want["name"].as_str().unwrap(),
            "{name}: tool name"
        );
        assert_eq!(
            call.arguments, want["arguments"],
            "{name}: arguments of {}",
            call.name
        );
        if let Some(id) = want["id"].as_str() {
            assert_eq!(call.id, id, "{name}: call id");
        } else {
            assert!(
                !call.id.is_empty(),
                "{name}: a call without a provider id gets one"
            );
        }
        if let Some(item_id) = want.get("item_id").and_then(Value::as_str) {
            assert_eq!(call.item_id.as_deref(), Some(item_id), "{name}: item id");
        }
        let custom = want.get("kind").and_then(Value::as_str) == Some("custom");
        assert_eq!(call.kind == ToolKind::Custom, custom, "{name}: kind");
    }
    if let Some(raw) = expected["finish_reason"].as_str() {
        assert_eq!(
            response.finish_reason.raw.as_deref(),
            Some(raw),
            "{name}: raw finish"
        );
    }
    if let Some(normalized) = expected
        .get("finish_reason_normalized")
        .and_then(Value::as_str)
    {
        let got = finish_kind_name(response.finish_reason.reason);
        let inferred_tool_calls = normalized == "stop" && !calls.is_empty() && got == "tool_calls";
        assert!(
            got == normalized || inferred_tool_calls,
            "{name}: finish {got} vs {normalized}"
        );
    }
    if let Some(reason) = expected.get("incomplete_reason").and_then(Value::as_str) {
        assert_eq!(
            response.finish_reason.reason,
            FinishKind::Length,
            "{name}: incomplete"
        );
        let warning = format!("incomplete: {reason}");
        assert!(
            response.warnings.contains(&warning),
            "{name}: {:?}",
            response.warnings
        );
    }
    if let Some(refusal) = expected.get("refusal").and_then(Value::as_str) {
        assert_eq!(response.refusal.as_deref(), Some(refusal), "{name}");
        let warning = format!("refusal: {refusal}");
        assert!(
            response.warnings.contains(&warning),
            "{name}: {:?}",
            response.warnings
        );
    }
    if let Some(usage) = expected["usage"].as_object() {
        let u = &response.usage;
        for (key, value) in usage {
            let want = value.as_u64();
            let got = match key.as_str() {
                "input_tokens" => Some(u.input_tokens),
                "output_tokens" => Some(u.output_tokens),
                "total_tokens" => Some(u.total_tokens),
                "reasoning_tokens" => u.reasoning_tokens,
                "cache_read_tokens" => u.cache_read_tokens,
                "cache_creation_tokens" => u.cache_write_tokens,
                other => panic!("{name}: unknown usage key {other}"),
            };
            assert_eq!(got, want, "{name}: usage {key}");
        }
    }
}

/// Compares an error with the `error` object of an `.expected.json`.
pub(crate) fn check_error(name: &str, expected: &Value, err: &Error) {
    assert_eq!(
        err.is_retryable(),
        expected["retryable"].as_bool().unwrap(),
        "{name}: retryable ({err:?})"
    );
    let needle = expected["message_contains"].as_str().unwrap();
    assert!(
        err.message().contains(needle),
        "{name}: message {:?} lacks {needle:?}",
        err.message()
    );
    let status = expected["status"].as_u64().unwrap();
    if status == 200 {
        assert_eq!(
            err.status(),
            None,
            "{name}: an in-stream error has no http status"
        );
    } else {
        assert_eq!(err.status().map(u64::from), Some(status), "{name}: status");
    }
    let code = err.code();
    let want_code = expected.get("code").filter(|c| !c.is_null());
    let want_type = expected.get("type").and_then(Value::as_str);
    match want_code {
        Some(Value::String(c)) => assert_eq!(code, Some(c.as_str()), "{name}: code"),
        Some(Value::Number(n)) => {
            let n = n.to_string();
            assert!(
                code == Some(n.as_str()) || code == want_type,
                "{name}: code {code:?}"
            );
        }
        _ => assert_eq!(code, want_type, "{name}: code"),
    }
    if let Some(seconds) = expected.get("retry_after_seconds").and_then(Value::as_f64) {
        let got = err.retry_after().map(|d| d.as_secs_f64());
        assert!(
            got.is_some_and(|g| (g - seconds).abs() < 1e-6),
            "{name}: retry after {got:?}"
        );
    }
}

/// The concatenated text and reasoning deltas of an event list.
pub(crate) fn streamed_text_and_reasoning(events: &[StreamEvent]) -> (String, String) {
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

/// Events without their payloads' ids, for comparing runs of the same body (Gemini call ids
/// are fresh on every run).
pub(crate) fn event_shapes(events: &[StreamEvent]) -> Vec<String> {
    events
        .iter()
        .map(|e| match e {
            StreamEvent::ToolCallStart { name, .. } => format!("ToolCallStart {name}"),
            StreamEvent::ToolCallDelta { delta, .. } => format!("ToolCallDelta {delta}"),
            StreamEvent::ToolCallEnd { tool_call } => {
                format!("ToolCallEnd {} {}", tool_call.name, tool_call.arguments)
            }
            StreamEvent::Finish {
                finish_reason,
                usage,
                response,
            } => format!(
                "Finish {finish_reason:?} {usage:?} {} {:?}",
                response.text(),
                response.reasoning()
            ),
            other => format!("{other:?}"),
        })
        .collect()
}
