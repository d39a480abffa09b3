//! JSON-RPC 2.0 over newline-delimited JSON, as ACP frames it: the bounded line reader, the
//! messages a client sends, and the connection (one locked writer; requests to the client
//! matched to their answers by id).
//!
//! It never parses more than one line at a time and never holds more than the cap of one:
//! a line over [`Connection::max_line`] is answered with an error and skipped to its
//! newline without being kept. Nothing here knows ACP's methods.

use std::collections::HashMap;
use std::io::{self, BufRead, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use serde_json::{Value, json};

use crate::sync::lock;

/// The error codes ACP uses (JSON-RPC's, and its own `-32002`).
pub(crate) mod code {
    pub(crate) const PARSE_ERROR: i64 = -32700;
    pub(crate) const INVALID_REQUEST: i64 = -32600;
    pub(crate) const METHOD_NOT_FOUND: i64 = -32601;
    pub(crate) const INVALID_PARAMS: i64 = -32602;
    pub(crate) const INTERNAL_ERROR: i64 = -32603;
    pub(crate) const RESOURCE_NOT_FOUND: i64 = -32002;
}

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RpcError {
    pub(crate) code: i64,
    pub(crate) message: String,
}

impl RpcError {
    pub(crate) fn new(code: i64, message: impl Into<String>) -> RpcError {
        RpcError {
            code,
            message: message.into(),
        }
    }

    pub(crate) fn invalid_params(message: impl Into<String>) -> RpcError {
        RpcError::new(code::INVALID_PARAMS, message)
    }

    fn to_json(&self) -> Value {
        json!({"code": self.code, "message": self.message})
    }
}

/// One message from the client.
#[derive(Debug)]
pub(crate) enum Incoming {
    /// A call that wants an answer.
    Request {
        id: Value,
        method: String,
        params: Value,
    },
    /// A call that wants none.
    Notification { method: String, params: Value },
    /// The client's answer to one of our requests.
    Response {
        id: Value,
        result: Result<Value, RpcError>,
    },
}

/// What one line of input was.
#[derive(Debug)]
pub(crate) enum Line {
    Message(Incoming),
    /// Not a message: answer this error (with id `null` when the line gave none).
    Invalid {
        id: Value,
        error: RpcError,
    },
    /// Blank line: nothing to do.
    Blank,
}

/// Parses one line (without its newline).
pub(crate) fn parse(line: &[u8]) -> Line {
    if line.iter().all(u8::is_ascii_whitespace) {
        return Line::Blank;
    }
    let value: Value = match serde_json::from_slice(line) {
        Ok(value) => value,
        Err(e) => {
            return Line::Invalid {
                id: Value::Null,
                error: RpcError::new(code::PARSE_ERROR, format!("parse error: {e}")),
            };
        }
    };
    let Value::Object(mut map) = value else {
        // Batches included: ACP does not use them.
        return Line::Invalid {
            id: Value::Null,
            error: RpcError::new(
                code::INVALID_REQUEST,
                "invalid request: a message is one JSON object (batches are not used)",
            ),
        };
    };
    let id = map.remove("id");
    let invalid = |id: Option<Value>, message: &str| Line::Invalid {
        id: id.unwrap_or(Value::Null),
        error: RpcError::new(code::INVALID_REQUEST, format!("invalid request: {message}")),
    };
    if map.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return invalid(id, "`jsonrpc` must be \"2.0\"");
    }
    if let Some(id) = &id {
        if !(id.is_string() || id.is_i64() || id.is_u64() || id.is_null()) {
            return invalid(None, "`id` must be a string or an integer");
        }
    }
    let params = map.remove("params").unwrap_or(Value::Null);
    match (map.remove("method"), id) {
        (Some(Value::String(method)), Some(id)) => {
            Line::Message(Incoming::Request { id, method, params })
        }
        (Some(Value::String(method)), None) => {
            Line::Message(Incoming::Notification { method, params })
        }
        (Some(_), id) => invalid(id, "`method` must be a string"),
        (None, Some(id)) => {
            let result = match (map.remove("result"), map.remove("error")) {
                (Some(result), None) => Ok(result),
                (None, Some(error)) => Err(RpcError::new(
                    error.get("code").and_then(Value::as_i64).unwrap_or(0),
                    error
                        .get("message")
                        .and_then(Value::as_str)
                        .unwrap_or("error")
                        .to_string(),
                )),
                _ => return invalid(Some(id), "a response has `result` or `error`"),
            };
            Line::Message(Incoming::Response { id, result })
        }
        (None, None) => invalid(None, "no `method`"),
    }
}

/// What [`read_line`] found.
#[derive(Debug, PartialEq)]
pub(crate) enum Read {
    /// A whole line (without its newline) is in the buffer.
    Line,
    /// The line was longer than the cap: it was skipped to its newline; this many bytes
    /// were seen.
    TooLong(usize),
    /// End of input.
    End,
}

/// Reads one line into `buf` (cleared first), keeping at most `max` bytes: a longer line is
/// consumed to its newline and dropped. A last line without a newline counts as a line.
pub(crate) fn read_line(
    input: &mut impl BufRead,
    buf: &mut Vec<u8>,
    max: usize,
) -> io::Result<Read> {
    buf.clear();
    let mut seen = 0usize;
    let mut too_long = false;
    loop {
        let chunk = match input.fill_buf() {
            Ok(chunk) => chunk,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if chunk.is_empty() {
            return Ok(match (too_long, seen) {
                (true, _) => Read::TooLong(seen),
                (false, 0) => Read::End,
                (false, _) => Read::Line,
            });
        }
        let (piece, done) = match memchr::memchr(b'\n', chunk) {
            Some(at) => (&chunk[..at], at + 1),
            None => (chunk, chunk.len()),
        };
        let ended = done <= chunk.len() && piece.len() < done;
        seen += piece.len();
        if !too_long {
            if buf.len() + piece.len() > max {
                too_long = true;
                buf.clear();
                buf.shrink_to(64 * 1024);
            } else {
                buf.extend_from_slice(piece);
            }
        }
        input.consume(done);
        if ended {
            return Ok(if too_long {
                Read::TooLong(seen)
            } else {
                Read::Line
            });
        }
    }
}

/// How long the agent waits for the client to answer one of its requests before giving
/// up (the client answers permission requests when the user does: that wait is bounded
/// by the prompt's cancel instead).
pub(crate) const CLIENT_ANSWER_TIMEOUT: Duration = Duration::from_secs(120);

/// The agent's side of one connection: the writer every thread shares, and the requests
/// sent to the client that wait for an answer.
pub(crate) struct Connection {
    writer: Mutex<Box<dyn Write + Send>>,
    /// Our requests waiting for the client's answer, by id.
    pending: Mutex<HashMap<u64, Sender<Result<Value, RpcError>>>>,
    next_id: AtomicU64,
    /// The input ended or the output failed: no request will be answered.
    closed: AtomicBool,
}

impl Connection {
    pub(crate) fn new(output: Box<dyn Write + Send>) -> Arc<Connection> {
        Arc::new(Connection {
            writer: Mutex::new(output),
            pending: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
            closed: AtomicBool::new(false),
        })
    }

    /// Writes one message as one line. A write that fails closes the connection (the
    /// client is gone); the caller carries on and the reader ends at end of input.
    pub(crate) fn send(&self, message: &Value) {
        let mut line = match serde_json::to_vec(message) {
            Ok(line) => line,
            Err(_) => return,
        };
        line.push(b'\n');
        let mut writer = lock(&self.writer);
        if writer
            .write_all(&line)
            .and_then(|()| writer.flush())
            .is_err()
        {
            drop(writer);
            self.close();
        }
    }

    pub(crate) fn respond(&self, id: Value, result: Result<Value, RpcError>) {
        let message = match result {
            Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
            Err(error) => json!({"jsonrpc": "2.0", "id": id, "error": error.to_json()}),
        };
        self.send(&message);
    }

    pub(crate) fn notify(&self, method: &str, params: Value) {
        self.send(&json!({"jsonrpc": "2.0", "method": method, "params": params}));
    }

    /// Sends a request to the client; the receiver gets its answer (or an error when the
    /// connection closes first).
    pub(crate) fn request(&self, method: &str, params: Value) -> Receiver<Result<Value, RpcError>> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        if self.closed.load(Ordering::SeqCst) {
            let _ = tx.send(Err(closed_error()));
            return rx;
        }
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        lock(&self.pending).insert(id, tx);
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        // Closed meanwhile: `close` may have drained the map before the insert.
        if self.closed.load(Ordering::SeqCst) {
            if let Some(tx) = lock(&self.pending).remove(&id) {
                let _ = tx.send(Err(closed_error()));
            }
        }
        rx
    }

    /// [`request`](Self::request) and wait for the answer, at most [`CLIENT_ANSWER_TIMEOUT`],
    /// giving up early when `give_up` says so (checked every 50 ms).
    pub(crate) fn call(
        &self,
        method: &str,
        params: Value,
        give_up: impl Fn() -> bool,
    ) -> Result<Value, RpcError> {
        let answer = self.request(method, params);
        let deadline = Instant::now() + CLIENT_ANSWER_TIMEOUT;
        loop {
            match answer.recv_timeout(Duration::from_millis(50)) {
                Ok(result) => return result,
                Err(RecvTimeoutError::Disconnected) => return Err(closed_error()),
                Err(RecvTimeoutError::Timeout) if give_up() => {
                    return Err(RpcError::new(code::INTERNAL_ERROR, "cancelled"));
                }
                Err(RecvTimeoutError::Timeout) if Instant::now() >= deadline => {
                    return Err(RpcError::new(
                        code::INTERNAL_ERROR,
                        format!("the client did not answer `{method}` in time"),
                    ));
                }
                Err(RecvTimeoutError::Timeout) => {}
            }
        }
    }

    /// Hands the client's answer to the request that waits for it. Ids are ours (numbers),
    /// but a client that echoes one as a string is understood too.
    pub(crate) fn answer(&self, id: &Value, result: Result<Value, RpcError>) {
        let id = match id {
            Value::Number(n) => n.as_u64(),
            Value::String(s) => s.parse().ok(),
            _ => None,
        };
        if let Some(tx) = id.and_then(|id| lock(&self.pending).remove(&id)) {
            let _ = tx.send(result);
        }
    }

    /// No answer will come any more: every waiting request fails now, later ones at once.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        for (_, tx) in lock(&self.pending).drain() {
            let _ = tx.send(Err(closed_error()));
        }
    }
}

fn closed_error() -> RpcError {
    RpcError::new(code::INTERNAL_ERROR, "the client closed the connection")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(input: &[u8], max: usize, reads: usize) -> Vec<(Read, Vec<u8>)> {
        // A reader that hands out `reads`-byte pieces, to cross every buffer boundary.
        let mut input = io::BufReader::with_capacity(reads.max(1), input);
        let mut buf = Vec::new();
        let mut out = Vec::new();
        loop {
            let read = read_line(&mut input, &mut buf, max).unwrap();
            if read == Read::End {
                return out;
            }
            out.push((read, buf.clone()));
        }
    }

    #[test]
    fn lines_are_split_at_newlines_whatever_the_read_size() {
        let input = b"{\"a\":1}\n\n{\"b\":2}\nlast";
        for reads in 1..input.len() + 1 {
            let got = lines(input, 100, reads);
            let texts: Vec<&[u8]> = got.iter().map(|(_, b)| b.as_slice()).collect();
            assert_eq!(
                texts,
                [&b"{\"a\":1}"[..], b"", b"{\"b\":2}", b"last"],
                "{reads}"
            );
        }
    }

    #[test]
    fn a_line_over_the_cap_is_skipped_without_being_kept() {
        let mut input = vec![b'x'; 10_000];
        input.extend_from_slice(b"\n{\"ok\":1}\n");
        for reads in [1, 7, 4096, 20_000] {
            let got = lines(&input, 100, reads);
            assert_eq!(got[0].0, Read::TooLong(10_000), "{reads}");
            assert!(got[0].1.is_empty());
            assert_eq!(got[1], (Read::Line, b"{\"ok\":1}".to_vec()));
        }
    }

    #[test]
    fn each_kind_of_message_is_told_apart() {
        let kind = |text: &str| match parse(text.as_bytes()) {
            Line::Message(Incoming::Request { .. }) => "request",
            Line::Message(Incoming::Notification { .. }) => "notification",
            Line::Message(Incoming::Response { result: Ok(_), .. }) => "result",
            Line::Message(Incoming::Response { result: Err(_), .. }) => "error",
            Line::Invalid { error, .. } if error.code == code::PARSE_ERROR => "parse error",
            Line::Invalid { .. } => "invalid",
            Line::Blank => "blank",
        };
        assert_eq!(kind(r#"{"jsonrpc":"2.0","id":1,"method":"x"}"#), "request");
        assert_eq!(
            kind(r#"{"jsonrpc":"2.0","id":"a","method":"x"}"#),
            "request"
        );
        assert_eq!(kind(r#"{"jsonrpc":"2.0","method":"x"}"#), "notification");
        assert_eq!(kind(r#"{"jsonrpc":"2.0","id":3,"result":{}}"#), "result");
        assert_eq!(
            kind(r#"{"jsonrpc":"2.0","id":3,"error":{"code":1,"message":"m"}}"#),
            "error"
        );
        assert_eq!(kind("{not json"), "parse error");
        assert_eq!(kind("[1,2]"), "invalid");
        assert_eq!(kind(r#"{"id":1,"method":"x"}"#), "invalid");
        assert_eq!(kind(r#"{"jsonrpc":"2.0","id":{},"method":"x"}"#), "invalid");
        assert_eq!(kind("   "), "blank");
    }
}
