//! Unit-test support for the wire formats: runs an inline body through [`sse::Parser`] and
//! a [`Decoder`], whole or in given reads, and sums the deltas a stream showed. Pure code:
//! no server, no threads, no files (the recorded corpus is replayed through the public
//! decoders by the integration tests' conformance checker, `tests/support/conformance.rs`).

use crate::error::{Error, Result};
use crate::llm::sse;
use crate::llm::wire::Decoder;
use crate::llm::{Response, StreamEvent};

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
