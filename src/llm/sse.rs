//! A sans-IO server-sent-events parser: bytes in, events out.
//!
//! It implements the WHATWG event-stream rules: `\n`, `\r\n` and bare `\r` line ends (also
//! when a `\r\n` pair is split across two reads), `data:` lines joined with `\n`, `event:`,
//! `id:` (ignored when it contains NUL) and `retry:` (digits only) fields, comment lines
//! starting with `:`, a leading byte-order mark, and UTF-8 characters split across reads
//! (lines are split on bytes and decoded whole). One departure, on purpose: at the end of
//! the stream a pending event without its closing blank line is still dispatched by
//! [`Parser::finish`], because real servers end streams that way.
//!
//! The parser never allocates per byte and never copies a line that arrives whole within
//! one chunk; it does no I/O and knows nothing of providers. Its memory is bounded: a line
//! or an event's data past [`MAX_EVENT_BYTES`] (far above any real provider event) stops the
//! parser, drops what it buffered, and [`Parser::overflowed`] says so; the caller ends the
//! stream with an error.

use crate::bytes;

/// The largest line, and the largest data of one event, the parser buffers: 16 MiB.
pub const MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Event {
    /// The `event:` field, if the event had a non-empty one.
    pub event: Option<String>,
    /// The `data:` lines joined with `\n`.
    pub data: String,
    /// The last event id seen so far in the stream, if any.
    pub id: Option<String>,
    /// The `retry:` value (milliseconds) if this event carried one.
    pub retry: Option<u64>,
}

/// The parser state between chunks. Cloning it forks a stream in progress.
#[derive(Debug, Clone, Default)]
pub struct Parser {
    /// An incomplete line carried over from the previous chunk.
    line: Vec<u8>,
    /// The previous chunk ended in `\r`: a `\n` starting the next chunk belongs to it.
    skip_lf: bool,
    /// No line has been processed yet (a BOM may lead the first one).
    started: bool,
    data: String,
    /// A `data:` line was seen since the last dispatch (the data may still be empty).
    has_data: bool,
    event: String,
    last_id: Option<String>,
    retry: Option<u64>,
    /// A `retry:` seen since the last dispatch, reported on the next event.
    pending_retry: Option<u64>,
    /// The buffering limit; 0 means [`MAX_EVENT_BYTES`].
    limit: usize,
    /// A line or an event passed the limit: everything after is ignored.
    overflowed: bool,
    /// Bytes fed so far: a long stream is scanned with vectorised code (`bytes::find_either_in`).
    fed: usize,
}

impl Parser {
    /// A parser at the start of a stream.
    pub fn new() -> Parser {
        Parser::default()
    }

    /// A parser that buffers at most `limit` bytes of one line or one event's data.
    pub fn with_limit(limit: usize) -> Parser {
        Parser {
            limit: limit.max(1),
            ..Parser::default()
        }
    }

    /// Whether a line or an event passed the limit. The parser then ignores all input and
    /// holds no buffered data; the stream should end with an error.
    pub fn overflowed(&self) -> bool {
        self.overflowed
    }

    fn limit(&self) -> usize {
        if self.limit == 0 {
            MAX_EVENT_BYTES
        } else {
            self.limit
        }
    }

    /// Stops the parser: drops every buffer (returning their memory) and ignores the rest.
    fn overflow(&mut self) {
        self.overflowed = true;
        self.line = Vec::new();
        self.data = String::new();
        self.event = String::new();
        self.has_data = false;
    }

    /// Feeds the next chunk of the body; complete events are pushed to `out`.
    pub fn feed(&mut self, chunk: &[u8], out: &mut Vec<Event>) {
        if self.overflowed {
            return;
        }
        let mut input = chunk;
        let fed_before = self.fed;
        self.fed = self.fed.saturating_add(chunk.len());
        if self.skip_lf && !input.is_empty() {
            if input[0] == b'\n' {
                input = &input[1..];
            }
            self.skip_lf = false;
        }
        // Validate the chunk's UTF-8 once (up to a character split at its end, or the first
        // invalid byte) rather than line by line: one pass instead of many short ones. Lines
        // inside the valid prefix are then sliced as `str` at their ASCII delimiters.
        let valid = match std::str::from_utf8(input) {
            Ok(text) => text,
            Err(e) => std::str::from_utf8(&input[..e.valid_up_to()]).unwrap_or_default(),
        };
        let mut pos = 0;
        while let Some(i) = bytes::find_either_in(b'\n', b'\r', &input[pos..], fed_before) {
            let end = pos + i;
            if self.line.len() + (end - pos) > self.limit() {
                self.overflow();
                return;
            }
            if self.line.is_empty() {
                self.process_line(&input[pos..end], valid.get(pos..end), out);
            } else {
                let mut line = std::mem::take(&mut self.line);
                line.extend_from_slice(&input[pos..end]);
                self.process_line(&line, None, out);
                line.clear();
                self.line = line;
            }
            if self.overflowed {
                return;
            }
            let mut next = end + 1;
            if input[end] == b'\r' {
                if next < input.len() {
                    if input[next] == b'\n' {
                        next += 1;
                    }
                } else {
                    self.skip_lf = true;
                }
            }
            pos = next;
            // "\n\n" ends an event: take the blank line without another search.
            if input[end] == b'\n' && input.get(pos) == Some(&b'\n') {
                self.process_line(b"", Some(""), out);
                pos += 1;
            }
        }
        if self.line.len() + (input.len() - pos) > self.limit() {
            self.overflow();
            return;
        }
        self.line.extend_from_slice(&input[pos..]);
    }

    /// Ends the stream: a pending unterminated line is processed and a pending event
    /// without its closing blank line is dispatched.
    pub fn finish(&mut self, out: &mut Vec<Event>) {
        if self.overflowed {
            return;
        }
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            self.process_line(&line, None, out);
        }
        self.dispatch(out);
        self.skip_lf = false;
    }

    /// The `retry:` value most recently seen, in milliseconds.
    pub fn retry(&self) -> Option<u64> {
        self.retry
    }

    /// Handles one line; `text` is the same line as `str` when it is known to be valid
    /// UTF-8 (otherwise values are decoded, lossily, here).
    fn process_line(&mut self, line: &[u8], text: Option<&str>, out: &mut Vec<Event>) {
        let mut start = 0;
        if !self.started {
            self.started = true;
            if line.starts_with(b"\xEF\xBB\xBF") {
                start = 3;
            }
        }
        let line = &line[start..];
        if line.is_empty() {
            self.dispatch(out);
            return;
        }
        if line[0] == b':' {
            return; // comment (keep-alive)
        }
        // The two fields every provider sends are recognised without a search.
        let colon = if line.starts_with(b"data:") {
            Some(4)
        } else if line.starts_with(b"event:") {
            Some(5)
        } else {
            bytes::find(b':', line)
        };
        let (name, value_start) = match colon {
            Some(colon) => {
                let space = usize::from(line.get(colon + 1) == Some(&b' '));
                (&line[..colon], colon + 1 + space)
            }
            None => (line, line.len()),
        };
        let value = &line[value_start..];
        // Both offsets follow ASCII bytes (the BOM is one whole character), so they are
        // character boundaries of `text`.
        let value_text = text.and_then(|t| t.get(start + value_start..));
        match name {
            b"data" => {
                // The usual event has one data line: it becomes the event's data with one
                // exact-size allocation and no copy at dispatch. Further lines are joined
                // with '\n'.
                if self.has_data {
                    self.data.push('\n');
                    push_value(&mut self.data, value, value_text);
                } else {
                    self.data = value_string(value, value_text);
                }
                self.has_data = true;
                if self.data.len() > self.limit() {
                    self.overflow();
                }
            }
            b"event" => self.event = value_string(value, value_text),
            b"id" if bytes::find(0, value).is_none() => {
                let mut id = String::new();
                push_value(&mut id, value, value_text);
                self.last_id = if id.is_empty() { None } else { Some(id) };
            }
            b"retry" if !value.is_empty() && value.iter().all(u8::is_ascii_digit) => {
                // All ASCII digits: valid UTF-8; too many digits to fit is ignored.
                self.retry = std::str::from_utf8(value).ok().and_then(|t| t.parse().ok());
                self.pending_retry = self.retry;
            }
            _ => {}
        }
    }

    fn dispatch(&mut self, out: &mut Vec<Event>) {
        let retry = self.pending_retry.take();
        if !self.has_data {
            self.event.clear();
            return;
        }
        self.has_data = false;
        let event = if self.event.is_empty() {
            None
        } else {
            Some(std::mem::take(&mut self.event))
        };
        let data = std::mem::take(&mut self.data);
        out.push(Event {
            event,
            data,
            id: self.last_id.clone(),
            retry,
        });
    }
}

fn value_string(bytes: &[u8], text: Option<&str>) -> String {
    match text {
        Some(text) => text.to_owned(),
        None => String::from_utf8_lossy(bytes).into_owned(),
    }
}

fn push_value(dst: &mut String, bytes: &[u8], text: Option<&str>) {
    match text {
        Some(text) => dst.push_str(text),
        None => push_utf8(dst, bytes),
    }
}

fn push_utf8(dst: &mut String, bytes: &[u8]) {
    match std::str::from_utf8(bytes) {
        Ok(s) => dst.push_str(s),
        Err(_) => dst.push_str(&String::from_utf8_lossy(bytes)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_all(input: &[u8]) -> Vec<Event> {
        let mut p = Parser::new();
        let mut out = Vec::new();
        p.feed(input, &mut out);
        p.finish(&mut out);
        out
    }

    fn parse_split(input: &[u8], at: usize) -> Vec<Event> {
        let mut p = Parser::new();
        let mut out = Vec::new();
        p.feed(&input[..at], &mut out);
        p.feed(&input[at..], &mut out);
        p.finish(&mut out);
        out
    }

    const SAMPLE: &str = "\u{feff}: keep-alive\nevent: message_start\ndata: {\"a\":1}\n\n\
        data: first\ndata: second\nid: 7\n\nretry: 1500\ndata: é–✓\n\nevent: ping\n\n\
        data\n\ndata: tail";

    fn expected() -> Vec<Event> {
        vec![
            Event {
                event: Some("message_start".into()),
                data: "{\"a\":1}".into(),
                id: None,
                retry: None,
            },
            Event {
                event: None,
                data: "first\nsecond".into(),
                id: Some("7".into()),
                retry: None,
            },
            Event {
                event: None,
                data: "é–✓".into(),
                id: Some("7".into()),
                retry: Some(1500),
            },
            Event {
                event: None,
                data: "".into(),
                id: Some("7".into()),
                retry: None,
            },
            Event {
                event: None,
                data: "tail".into(),
                id: Some("7".into()),
                retry: None,
            },
        ]
    }

    #[test]
    fn parses_fields_comments_and_unterminated_tail() {
        assert_eq!(parse_all(SAMPLE.as_bytes()), expected());
    }

    #[test]
    fn every_split_point_and_every_line_ending_give_the_same_events() {
        for ending in ["\n", "\r\n", "\r"] {
            let input = SAMPLE.replace('\n', ending);
            let bytes = input.as_bytes();
            for at in 0..=bytes.len() {
                assert_eq!(
                    parse_split(bytes, at),
                    expected(),
                    "ending {ending:?} split {at}"
                );
            }
        }
    }

    #[test]
    fn byte_at_a_time_matches_whole() {
        let input = SAMPLE.replace('\n', "\r\n");
        let mut p = Parser::new();
        let mut out = Vec::new();
        for b in input.as_bytes() {
            p.feed(std::slice::from_ref(b), &mut out);
        }
        p.finish(&mut out);
        assert_eq!(out, expected());
    }

    #[test]
    fn id_with_nul_is_ignored_and_bad_retry_is_ignored() {
        let events = parse_all(b"id: a\0b\nretry: 12x\ndata: x\n\n");
        assert_eq!(events[0].id, None);
        assert_eq!(events[0].retry, None);
    }

    #[test]
    fn a_line_over_the_limit_stops_the_parser_and_frees_its_buffer() {
        // One line arriving in many chunks, without a line end.
        let mut parser = Parser::with_limit(1000);
        let mut out = Vec::new();
        for _ in 0..100 {
            parser.feed(&[b'x'; 64], &mut out);
        }
        assert!(parser.overflowed());
        assert!(parser.line.capacity() == 0 && out.is_empty());
        // Nothing after the overflow is parsed, not even a complete event.
        parser.feed(b"\ndata: late\n\n", &mut out);
        parser.finish(&mut out);
        assert!(out.is_empty());
        // A whole long line inside one chunk overflows too.
        let mut parser = Parser::with_limit(1000);
        let mut long = b"data: ".to_vec();
        long.extend([b'y'; 2000]);
        long.extend(b"\n\n");
        parser.feed(&long, &mut out);
        assert!(parser.overflowed() && out.is_empty());
    }

    #[test]
    fn many_short_data_lines_over_the_limit_stop_the_parser() {
        let mut parser = Parser::with_limit(1000);
        let mut out = Vec::new();
        for _ in 0..100 {
            parser.feed(b"data: 0123456789abcdef\n", &mut out);
        }
        assert!(parser.overflowed() && out.is_empty());
        // Below the limit, events of every size pass.
        let mut parser = Parser::with_limit(1000);
        parser.feed(b"data: 0123456789\ndata: abc\n\n", &mut out);
        assert!(!parser.overflowed());
        assert_eq!(out[0].data, "0123456789\nabc");
    }

    #[test]
    fn invalid_utf8_is_replaced_not_a_panic() {
        let events = parse_all(b"data: a\xffb\n\n");
        assert_eq!(events[0].data, "a\u{fffd}b");
    }
}
