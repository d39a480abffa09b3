//! The SSE parser against every recorded stream of every format: all split points, and
//! LF, CRLF and CR-only framings of the same stream.

use std::path::PathBuf;

use agentloop::unstable::{SseEvent as Event, SseParser as Parser};

use support::conformance;

fn all_captures() -> Vec<PathBuf> {
    let mut files = Vec::new();
    for format in ["anthropic", "openai-responses", "openai-chat", "gemini"] {
        let found = conformance::sse_files(format);
        assert!(!found.is_empty(), "no captures for {format}");
        files.extend(found);
    }
    files
}

fn parse_whole(bytes: &[u8]) -> Vec<Event> {
    let mut parser = Parser::new();
    let mut out = Vec::new();
    parser.feed(bytes, &mut out);
    parser.finish(&mut out);
    out
}

/// The same stream with every line ending replaced by `ending`.
fn reframe(bytes: &[u8], ending: &str) -> Vec<u8> {
    let text = String::from_utf8(bytes.to_vec()).expect("captures are UTF-8");
    let lf = text.replace("\r\n", "\n").replace('\r', "\n");
    lf.replace('\n', ending).into_bytes()
}

/// Window size for the split-point check (see below).
const WINDOW: usize = 64;

/// Checks that splitting `bytes` at any point gives the events of the whole.
///
/// Re-parsing the whole stream for each of its ~10⁵ split points would take minutes in a
/// debug build, so the stream is walked in windows: the parser state at a window's start
/// is forked (`Clone`), the window is fed once whole and once split at each of its
/// points, and both the events and the parser's complete state (`Debug`) at the window's
/// end must agree. Equal state means equal events for the rest of the stream, so every
/// split point is covered; and the windows chained together must give exactly the events
/// of one whole feed.
fn assert_every_split_point_agrees(bytes: &[u8], what: &str) {
    let whole = parse_whole(bytes);
    assert!(!whole.is_empty(), "{what}: no events");

    let mut base = Parser::new();
    let mut chained = Vec::new();
    let mut start = 0;
    while start < bytes.len() {
        let end = (start + WINDOW).min(bytes.len());
        let window = &bytes[start..end];
        let mut reference = base.clone();
        let mut reference_events = Vec::new();
        reference.feed(window, &mut reference_events);
        let reference_state = format!("{reference:?}");
        for split in 1..window.len() {
            let mut forked = base.clone();
            let mut events = Vec::new();
            forked.feed(&window[..split], &mut events);
            forked.feed(&window[split..], &mut events);
            assert_eq!(
                events,
                reference_events,
                "{what}: events differ when split at byte {}",
                start + split
            );
            assert_eq!(
                format!("{forked:?}"),
                reference_state,
                "{what}: parser state differs when split at byte {}",
                start + split
            );
        }
        chained.extend(reference_events);
        base = reference;
        start = end;
    }
    base.finish(&mut chained);
    assert_eq!(
        chained, whole,
        "{what}: chained windows differ from one whole feed"
    );
}

#[test]
fn every_split_point_of_every_capture_gives_the_same_events() {
    for capture in all_captures() {
        let bytes = std::fs::read(&capture).unwrap();
        for (name, ending) in [
            ("as recorded", None),
            ("crlf", Some("\r\n")),
            ("cr", Some("\r")),
        ] {
            let framed = match ending {
                None => bytes.clone(),
                Some(ending) => reframe(&bytes, ending),
            };
            assert_every_split_point_agrees(&framed, &format!("{} {name}", capture.display()));
        }
    }
}

#[test]
fn lf_crlf_and_cr_framings_of_every_capture_give_the_same_events() {
    for capture in all_captures() {
        let bytes = std::fs::read(&capture).unwrap();
        let recorded = parse_whole(&bytes);
        assert!(!recorded.is_empty(), "{}", capture.display());
        for ending in ["\n", "\r\n", "\r"] {
            let framed = reframe(&bytes, ending);
            assert_eq!(
                parse_whole(&framed),
                recorded,
                "{} framed with {ending:?}",
                capture.display()
            );
        }
    }
}

#[test]
fn byte_at_a_time_matches_whole_for_every_capture() {
    for capture in all_captures() {
        let bytes = std::fs::read(&capture).unwrap();
        let mut parser = Parser::new();
        let mut out = Vec::new();
        for byte in &bytes {
            parser.feed(std::slice::from_ref(byte), &mut out);
        }
        parser.finish(&mut out);
        assert_eq!(out, parse_whole(&bytes), "{}", capture.display());
    }
}

#[test]
fn captures_contain_the_quirks_the_parser_must_handle() {
    // Guards the corpus this file relies on: CRLF framing (Gemini), comment lines
    // (OpenRouter), and multi-byte UTF-8 (DeepSeek emoji, Anthropic en dash).
    let all: Vec<Vec<u8>> = all_captures()
        .iter()
        .map(|p| std::fs::read(p).unwrap())
        .collect();
    assert!(all.iter().any(|b| b.windows(4).any(|w| w == b"\r\n\r\n")));
    assert!(
        all.iter()
            .any(|b| b.starts_with(b":") || b.windows(2).any(|w| w == b"\n:"))
    );
    assert!(all.iter().any(|b| b.iter().any(|&c| c >= 0xf0)));
}
